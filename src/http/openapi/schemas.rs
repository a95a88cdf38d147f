//! Component schemas of the OpenAPI document: the wire shapes of WIRE.md as Rust types that
//! derive [`ToSchema`]. They describe what the handlers accept and answer; the handlers decode
//! leniently (every request field optional, checked in WIRE.md's order) and keel-actors stays
//! free of HTTP concerns, so these types are the document's own. `tests/api/openapi.rs`
//! validates real responses and pushes against them, which is what keeps them true.

#![allow(dead_code)] // Only read by the derive.

use std::collections::BTreeMap;

use serde_json::Value;
use utoipa::ToSchema;

/// The error envelope of every failed request (WIRE.md §3).
#[derive(ToSchema)]
pub struct Error {
    /// Human-readable message (`validation error: …`, `not found`, …).
    error: String,
    /// Machine-readable code.
    code: ErrorCode,
    /// On a 403 only: what refused (`hook:<id>` when a `pre_create` hook refused a creation).
    rule_id: Option<String>,
}

/// Codes of the error envelope.
#[derive(ToSchema)]
#[schema(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ErrorCode {
    /// 400.
    ValidationError,
    /// 401.
    Unauthorized,
    /// 403 (a `pre_create` hook refused the creation).
    Forbidden,
    /// 404.
    NotFound,
    /// 405, with `Allow` (a method the path does not have).
    MethodNotAllowed,
    /// 409.
    Conflict,
    /// 429, with `Retry-After`.
    RateLimited,
    /// 500.
    InternalError,
    /// 503.
    ServiceUnavailable,
}

/// `{"status": "…"}` answers (health, ready, signal, step results, capabilities).
#[derive(ToSchema)]
pub struct Status {
    /// `ok` or `ready`.
    status: String,
}

/// Status of an execution.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum ExecutionStatus {
    /// Waiting for an agent.
    Pending,
    /// Held by an agent.
    Running,
    /// Waiting on steps, a signal or an approval.
    Blocked,
    /// Finished with an output.
    Completed,
    /// Failed.
    Failed,
    /// Cancelled.
    Cancelled,
}

/// The Execution object (WIRE.md §6).
#[derive(ToSchema)]
pub struct Execution {
    /// Execution id (UUIDv7).
    id: String,
    status: ExecutionStatus,
    /// Agent that runs it.
    agent_id: String,
    /// Labels given at creation; `null` when none were given.
    labels: Option<BTreeMap<String, String>>,
    /// Input as given (any JSON, `null` when absent).
    input: Option<Value>,
    /// Output; present only once completed with a non-null output.
    #[schema(required = false)]
    output: Option<Value>,
    /// Why it failed, or why it was cancelled (Keel addition; present only then).
    #[schema(required = false)]
    error: Option<String>,
    /// Creation answers only: no consumer of the agent is connected, and whether one ever was
    /// since the kernel started (Keel addition).
    #[schema(required = false)]
    notice: Option<String>,
    /// RFC 3339 with microseconds, UTC.
    #[schema(format = DateTime)]
    created_at: String,
    /// RFC 3339 with microseconds, UTC.
    #[schema(format = DateTime)]
    updated_at: String,
    /// Budget limits, usage and what remains (Keel addition, `GET` only, present when the
    /// policy gives the agent a budget).
    #[schema(required = false)]
    budget: Option<super::guardrails::BudgetView>,
}

/// One entry of the execution list: labels are always an object.
#[derive(ToSchema)]
pub struct ExecutionSummary {
    id: String,
    status: ExecutionStatus,
    agent_id: String,
    labels: BTreeMap<String, String>,
    /// Why it failed, or why it was cancelled (Keel addition; present only then).
    #[schema(required = false)]
    error: Option<String>,
    #[schema(format = DateTime)]
    created_at: String,
    #[schema(format = DateTime)]
    updated_at: String,
}

/// A page of `GET /v0/executions`.
#[derive(ToSchema)]
pub struct ExecutionList {
    executions: Vec<ExecutionSummary>,
    /// Cursor of the next page; empty on the last page.
    next_cursor: String,
}

/// One event of an execution's log (WIRE.md §15); also the `data:` of the execution stream.
#[derive(ToSchema)]
pub struct Event {
    /// Event id (UUIDv7).
    id: String,
    execution_id: String,
    /// Step it concerns, when step-scoped.
    #[schema(required = false)]
    step_id: Option<String>,
    /// Event type (`execution.created`, `step.completed`, …).
    #[schema(rename = "type")]
    event_type: String,
    /// Type-specific payload. Keel adds fields the reference kernel does not write, e.g.
    /// `priority` and, when traces are exported, `traceparent` on `execution.created`.
    payload: Value,
    /// Payload schema version (1).
    schema_version: i64,
    #[schema(format = DateTime)]
    timestamp: String,
    causation_id: String,
    correlation_id: String,
    /// Idempotency key of the intent that produced it.
    #[schema(required = false)]
    idempotency_key: Option<String>,
    /// Position in the execution's log, from 1, contiguous.
    sequence: i64,
}

/// A page of `GET /v0/executions/{id}/events`.
#[derive(ToSchema)]
pub struct EventPage {
    events: Vec<Event>,
    /// Sequence of the last event of the page (0 when empty).
    latest_sequence: i64,
}

/// Body of `POST /v0/executions`.
#[derive(ToSchema)]
pub struct CreateExecution {
    /// Agent that runs it (≤ 256 bytes, not empty).
    agent_id: String,
    /// Any JSON.
    #[schema(required = false)]
    input: Option<Value>,
    /// String labels.
    #[schema(required = false)]
    labels: Option<BTreeMap<String, String>>,
    /// Dispatch priority, an integer (higher first; default 0).
    #[schema(required = false)]
    priority: Option<i64>,
}

/// Body of `POST /v0/executions/{id}/signal`.
#[derive(ToSchema)]
pub struct Signal {
    /// Signal type (≤ 256 bytes, not empty).
    signal_type: String,
    /// Any JSON.
    #[schema(required = false)]
    payload: Option<Value>,
}

/// Body of `POST /v0/executions/{id}/steps/{step_id}/reconcile` (Keel addition,
/// docs/failure-semantics.md).
#[derive(ToSchema)]
pub struct Reconcile {
    /// `happened` (it ran: `result` is its result), `run_again` (it did not: a new attempt with
    /// the same idempotency key) or `fail` (the step fails with `error`).
    answer: String,
    /// The result, for `happened` (null when absent).
    #[schema(required = false)]
    result: Option<Value>,
    /// The error, for `fail`.
    #[schema(required = false)]
    error: Option<String>,
}

/// Intent types.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum IntentType {
    /// Call a tool.
    InvokeTool,
    /// Finish with an output.
    Complete,
    /// Finish with an error.
    Fail,
    /// Wait for a signal.
    Wait,
}

/// The `intent` object (WIRE.md §9.1); which fields apply depends on `type`.
#[derive(ToSchema)]
pub struct IntentFields {
    #[schema(rename = "type")]
    intent_type: IntentType,
    /// invoke_tool: required.
    #[schema(required = false)]
    tool_id: Option<String>,
    /// invoke_tool: any JSON.
    #[schema(required = false)]
    arguments: Option<Value>,
    /// invoke_tool: deduplicates retried intents.
    #[schema(required = false)]
    idempotency_key: Option<String>,
    /// invoke_tool: run on a runner instead of in the agent.
    #[schema(required = false)]
    remote: Option<bool>,
    /// complete: any JSON.
    #[schema(required = false)]
    output: Option<Value>,
    /// fail: required.
    #[schema(required = false)]
    error: Option<String>,
    /// wait: required.
    #[schema(required = false)]
    signal_type: Option<String>,
}

/// Body of `POST /v0/agents/intent`.
#[derive(ToSchema)]
pub struct Intent {
    execution_id: String,
    session_id: String,
    intent: IntentFields,
}

/// Answer of an evaluated intent (WIRE.md §9.3).
#[derive(ToSchema)]
pub struct IntentAnswer {
    accepted: bool,
    /// invoke_tool: the new step.
    #[schema(required = false)]
    step_id: Option<String>,
    /// Present (true) when the step waits for a human approval.
    #[schema(required = false)]
    pending_approval: Option<bool>,
    /// Why it was denied.
    #[schema(required = false)]
    error: Option<String>,
    /// Keel addition, only for a request with `Keel-Capabilities: modify`: the arguments a
    /// `pre_tool` hook gave this local tool call (absent when unchanged).
    #[schema(required = false, value_type = Object)]
    arguments: Option<serde_json::Value>,
    /// Keel addition, only for a request with `Keel-Capabilities: replay`: the recorded outcome
    /// (`of_step_id`, `status`, `result`, `error`) of a local call an earlier run completed;
    /// return it instead of running the tool, and post no step result.
    #[schema(required = false, value_type = Object)]
    replay: Option<serde_json::Value>,
}

/// Body of `POST /v0/agents/step-result` (a local step's outcome).
#[derive(ToSchema)]
pub struct AgentStepResult {
    execution_id: String,
    session_id: String,
    step_id: String,
    /// Defaults to false.
    #[schema(required = false)]
    success: Option<bool>,
    #[schema(required = false)]
    data: Option<Value>,
    #[schema(required = false)]
    error: Option<String>,
    /// What the call cost, numbers >= 0 per unit (Keel addition, e.g. `{"usd": 0.01}`).
    #[schema(required = false)]
    cost: Option<BTreeMap<String, f64>>,
}

/// Body of `POST /v0/runners/{id}/results` (a remote step's outcome).
#[derive(ToSchema)]
pub struct RunnerResult {
    job_id: String,
    execution_id: String,
    step_id: String,
    #[schema(required = false)]
    success: Option<bool>,
    #[schema(required = false)]
    data: Option<Value>,
    #[schema(required = false)]
    error: Option<String>,
    /// Retry the step (within its attempts) when it failed.
    #[schema(required = false)]
    retryable: Option<bool>,
    #[schema(format = DateTime, required = false)]
    started_at: Option<String>,
    #[schema(format = DateTime, required = false)]
    completed_at: Option<String>,
    /// The runner connection, marked idle again.
    #[schema(required = false)]
    consumer_id: Option<String>,
    /// What the call cost, numbers >= 0 per unit (Keel addition, e.g. `{"usd": 0.01}`).
    #[schema(required = false)]
    cost: Option<BTreeMap<String, f64>>,
}

/// Body of `POST /v0/runners/steps/{step_id}/started`.
#[derive(ToSchema)]
pub struct StepStarted {
    execution_id: String,
    runner_id: String,
}

/// Body of `POST /v0/runners/steps/{step_id}/progress` (an MCP progress notification).
#[derive(ToSchema)]
pub struct StepProgress {
    execution_id: String,
    runner_id: String,
    /// Progress so far.
    progress: f64,
    /// Total, when known.
    #[schema(required = false)]
    total: Option<f64>,
    /// What the tool said (cut to 512 bytes).
    #[schema(required = false)]
    message: Option<String>,
}

/// A tool schema published by a runner.
#[derive(ToSchema)]
pub struct PublishedTool {
    id: String,
    #[schema(required = false)]
    description: Option<Value>,
    /// JSON Schema of the arguments (an object).
    #[schema(required = false)]
    input_schema: Option<Value>,
}

/// Body of `POST /v0/runners/{id}/tools`.
#[derive(ToSchema)]
pub struct PublishTools {
    tools: Vec<PublishedTool>,
}

/// Body of `POST /v0/runners/{id}/capabilities`.
#[derive(ToSchema)]
pub struct Capabilities {
    /// Tool ids the runner's connections serve.
    tools: Vec<String>,
}

/// One entry of the tool directory (WIRE.md §13.7).
#[derive(ToSchema)]
pub struct Tool {
    id: String,
    description: Value,
    input_schema: Value,
    runner_id: String,
    #[schema(format = DateTime)]
    registered_at: String,
}

/// One message of a `text/event-stream` body (WIRE.md §8): `event:`, one `data:` line per line
/// of a JSON document, and `id:` on the execution stream. The JSON's schema depends on the event
/// (`Event`, `ExecutionAssigned`, `JobAssigned`, …; see each stream's description).
#[derive(ToSchema)]
pub struct SseMessage {
    /// Event name.
    event: String,
    /// A JSON document.
    data: String,
    /// Sequence of the event (execution stream only).
    #[schema(required = false)]
    id: Option<String>,
}

/// `data:` of `execution.assigned` on the agent stream (WIRE.md §10.4.1).
#[derive(ToSchema)]
pub struct ExecutionAssigned {
    execution_id: String,
    session_id: String,
    agent_id: String,
    input: Option<Value>,
    #[schema(required = false)]
    labels: Option<BTreeMap<String, String>>,
    /// Terminal steps of earlier attempts.
    #[schema(required = false)]
    history: Option<Vec<Value>>,
    /// Keel's addition, only when traces are exported: the W3C trace context of the execution
    /// (docs/tracing.md). Also on `tool.result`, `signal.received`, `approval.resolved` and
    /// `execution.cancelled`. The rebuno SDK ignores it.
    #[schema(
        required = false,
        pattern = "^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$"
    )]
    traceparent: Option<String>,
}

/// `data:` of `job.assigned` on the runner stream (WIRE.md §13.2).
#[derive(ToSchema)]
pub struct JobAssigned {
    id: String,
    execution_id: String,
    step_id: String,
    attempt: i64,
    tool_id: String,
    tool_version: i64,
    arguments: Option<Value>,
    #[schema(format = DateTime)]
    deadline: String,
    #[schema(format = DateTime)]
    not_before: String,
    /// Keel's addition: the key of the logical call, the same for every retry, runner failover
    /// and re-run of it (`{execution_id}:{step_id}` of its first step), to pass on to an outside
    /// API. The rebuno SDK ignores it.
    #[schema(required = false)]
    idempotency_key: Option<String>,
    /// Keel's addition, only when traces are exported: the W3C trace context of the job's step
    /// span, for the runner to continue (docs/tracing.md). The rebuno SDK ignores it.
    #[schema(
        required = false,
        pattern = "^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$"
    )]
    traceparent: Option<String>,
}
