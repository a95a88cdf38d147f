//! Component schemas of the OpenAPI document: the wire shapes of WIRE.md as Rust types that
//! derive [`ToSchema`]. They describe what the handlers accept and answer; the handlers decode
//! leniently (every request field optional, checked in WIRE.md's order) and keel-actors stays
//! free of HTTP concerns, so these types are the document's own. `tests/api/openapi.rs`
//! validates real responses and pushes against them, which is what keeps them true.

#![allow(dead_code)] // Only read by the derive.

use std::collections::BTreeMap;

use serde_json::Value;
use utoipa::ToSchema;

pub use super::protocol::{
    AgentStepResult, Capabilities, ExecutionAssigned, Intent, IntentAnswer, IntentFields,
    IntentType, JobAssigned, PublishTools, PublishedTool, RunnerResult, SseMessage, StepProgress,
    StepStarted, Tool,
};

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
