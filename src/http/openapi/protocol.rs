//! Component schemas of the agent and runner protocol: intents and their answers, step
//! results and progress, published tools and capabilities, and the messages pushed over SSE.
//! The execution and event shapes are in `schemas.rs`, which re-exports these.

#![allow(dead_code)] // Only read by the derive.

use std::collections::BTreeMap;

use serde_json::Value;
use utoipa::ToSchema;

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
