//! One `#[utoipa::path]` per route: method, path, parameters, bodies and every answer. They
//! sit on empty functions here, not on the handlers, so the handler files keep to their
//! decoding and stay short; `tests/api/openapi.rs` checks that this list and the router agree
//! (every routed path and method documented, every documented one routed).
//!
//! To document a new route: add a function here (or in a module of your own beside it) with
//! `#[utoipa::path(...)]`, list it in `paths(...)` of [`super::ApiDoc`], and register the
//! handler in `super::super::router` as usual.

#![allow(dead_code)] // The functions only carry the attributes.

use super::answers::{BadPath, Unauthorized};
use super::schemas::{
    AgentStepResult, Capabilities, CreateExecution, Error, EventPage, Execution, ExecutionList,
    Intent, IntentAnswer, PublishTools, Reconcile, RunnerResult, Signal, SseMessage, Status,
    StepProgress, StepStarted, Tool,
};

/// `text/event-stream` bodies: framing of WIRE.md §8.
const SSE: &str = "text/event-stream";

#[utoipa::path(get, path = "/v0/health", tag = "observability", security(()),
    responses((status = 200, description = "The process serves HTTP", body = Status)))]
fn health() {}

#[utoipa::path(get, path = "/v0/ready", tag = "observability", security(()),
    responses(
        (status = 200, description = "The store answers", body = Status),
        (status = 503, description = "The store does not answer", body = Error),
    ))]
fn ready() {}

#[utoipa::path(get, path = "/metrics", tag = "observability",
    responses(
        (status = 200, description = "OpenMetrics text exposition (docs/metrics.md)",
            content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8", body = String),
        Unauthorized,
    ))]
fn metrics() {}

#[utoipa::path(get, path = "/v0/openapi.json", tag = "observability",
    responses(
        (status = 200, description = "This document (OpenAPI 3.1)", body = Object),
        Unauthorized,
    ))]
fn openapi() {}

#[utoipa::path(post, path = "/v0/executions", tag = "executions",
    params(("Idempotency-Key" = Option<String>, Header,
        description = "Creating twice with one key answers the first execution (200)")),
    request_body = CreateExecution,
    responses(
        (status = 201, description = "Created; `running` when an agent took it at once", body = Execution),
        (status = 200, description = "Replay of an earlier create with the same Idempotency-Key", body = Execution),
        (status = 400, description = "Invalid body", body = Error),
        Unauthorized,
        (status = 403, description = "A `pre_create` hook refused the creation (FORBIDDEN, `rule_id` `hook:<id>`); nothing was created", body = Error),
        (status = 409, description = "Idempotency-Key reused with another body", body = Error),
        (status = 429, description = "Pending backlog full (Retry-After)", body = Error),
    ))]
fn create_execution() {}

#[utoipa::path(get, path = "/v0/executions", tag = "executions",
    params(
        ("status" = Option<String>, Query, description = "pending, running, blocked, completed, failed or cancelled"),
        ("agent_id" = Option<String>, Query, description = "Only this agent's executions"),
        ("label" = Option<Vec<String>>, Query, description = "`key=value` (or rebuno's `key:value`), repeatable, all must match"),
        ("limit" = Option<i64>, Query, description = "Page size, 1-200 (default 50)"),
        ("cursor" = Option<String>, Query, description = "`next_cursor` of the previous page"),
        ("created_after" = Option<String>, Query, description = "RFC 3339; only executions created at or after it (paging stops there)"),
        ("created_before" = Option<String>, Query, description = "RFC 3339; only executions created before it (where the first page starts)"),
    ),
    responses(
        (status = 200, description = "A page, newest first", body = ExecutionList),
        (status = 400, description = "Invalid status, label filter, cursor or time", body = Error),
        Unauthorized,
    ))]
fn list_executions() {}

#[utoipa::path(get, path = "/v0/executions/{id}", tag = "executions",
    params(("id" = String, Path, description = "Execution id")),
    responses(
        (status = 200, description = "The execution", body = Execution),
        BadPath,
        Unauthorized,
        (status = 404, description = "No such execution", body = Error),
    ))]
fn get_execution() {}

#[utoipa::path(post, path = "/v0/executions/{id}/cancel", tag = "executions",
    params(("id" = String, Path, description = "Execution id")),
    responses(
        (status = 200, description = "Cancelled (or already terminal)", body = Execution),
        BadPath,
        Unauthorized,
        (status = 404, description = "No such execution", body = Error),
        (status = 409, description = "Already terminal", body = Error),
    ))]
fn cancel_execution() {}

#[utoipa::path(post, path = "/v0/executions/{id}/signal", tag = "executions",
    params(("id" = String, Path, description = "Execution id")),
    request_body = Signal,
    responses(
        (status = 200, description = "Recorded", body = Status),
        (status = 400, description = "Invalid body", body = Error),
        Unauthorized,
        (status = 404, description = "No such execution", body = Error),
        (status = 409, description = "Execution terminal", body = Error),
    ))]
fn signal_execution() {}

#[utoipa::path(post, path = "/v0/executions/{id}/steps/{step_id}/reconcile", tag = "executions",
    params(
        ("id" = String, Path, description = "Execution id"),
        ("step_id" = String, Path, description = "Step whose outcome is unknown (`step.outcome_unknown`)"),
    ),
    request_body = Reconcile,
    responses(
        (status = 200, description = "Recorded (`step.reconciled`, then the step's result, or its new attempt)", body = Status),
        (status = 400, description = "Invalid body (answer missing or not happened/run_again/fail)", body = Error),
        Unauthorized,
        (status = 403, description = "The key's role is not admin or operator", body = Error),
        (status = 404, description = "No such execution or step", body = Error),
        (status = 409, description = "The step's outcome is not unknown, or the execution is terminal", body = Error),
    ))]
fn reconcile_step() {}

#[utoipa::path(get, path = "/v0/executions/{id}/events", tag = "executions",
    params(
        ("id" = String, Path, description = "Execution id"),
        ("after_sequence" = Option<i64>, Query, description = "Only events after this sequence"),
        ("limit" = Option<i64>, Query, description = "Page size, 1-1000 (default 100)"),
    ),
    responses(
        (status = 200, description = "A page of the log, oldest first (empty for unknown ids)", body = EventPage),
        (status = 400, description = "Invalid query", body = Error),
        Unauthorized,
    ))]
fn execution_events() {}

#[utoipa::path(get, path = "/v0/executions/{id}/stream", tag = "streams",
    params(
        ("id" = String, Path, description = "Execution id"),
        ("after_sequence" = Option<i64>, Query, description = "Replay events after this sequence"),
        ("Last-Event-ID" = Option<String>, Header,
            description = "Sent by EventSource on reconnect; resumes like after_sequence (the later wins)"),
    ),
    responses(
        (status = 200, description = "SSE: `id: <sequence>`, `event: <type>`, `data: <Event>` \
            (schema Event) for every event of the log, then live ones; ends after the terminal \
            event. `:heartbeat` comments keep it open.", content_type = SSE, body = SseMessage),
        BadPath,
        Unauthorized,
        (status = 404, description = "No such execution", body = Error),
    ))]
fn execution_stream() {}

#[utoipa::path(get, path = "/v0/agents/stream", tag = "streams",
    params(
        ("agent_id" = String, Query, description = "Agent id"),
        ("consumer_id" = String, Query, description = "Stable id of this agent process"),
    ),
    responses(
        (status = 200, description = "SSE of pushes to the agent: `execution.assigned` \
            (schema ExecutionAssigned), `tool.result`, `signal.received`, `approval.resolved`, \
            `execution.cancelled`.", content_type = SSE, body = SseMessage),
        (status = 400, description = "Missing or over-long ids", body = Error),
        Unauthorized,
    ))]
fn agent_stream() {}

#[utoipa::path(post, path = "/v0/agents/intent", tag = "agents",
    request_body = Intent,
    responses(
        (status = 200, description = "Evaluated: accepted or denied", body = IntentAnswer),
        (status = 400, description = "Invalid intent", body = Error),
        (status = 401, description = "Missing token, or unknown or stale session", body = Error),
        (status = 404, description = "No such execution", body = Error),
        (status = 409, description = "Execution not in a state that takes this intent", body = Error),
    ))]
fn agent_intent() {}

#[utoipa::path(post, path = "/v0/agents/step-result", tag = "agents",
    request_body = AgentStepResult,
    responses(
        (status = 200, description = "Recorded. With `Keel-Capabilities: modify`, `result` \
            carries the result a post_tool hook put in place of the agent's.", body = Status),
        (status = 400, description = "Missing ids", body = Error),
        (status = 403, description = "A post_tool hook failed the step (or changed the result \
            of an agent that cannot apply it): do not use the result", body = Error),
        (status = 401, description = "Missing token, or unknown or stale session", body = Error),
        (status = 404, description = "No such step", body = Error),
        (status = 409, description = "Step already resolved", body = Error),
    ))]
fn agent_step_result() {}

#[utoipa::path(get, path = "/v0/runners/stream", tag = "streams",
    params(
        ("runner_id" = String, Query, description = "Runner id"),
        ("consumer_id" = String, Query, description = "Stable id of this runner process"),
        ("capabilities" = Option<String>, Query, description = "Comma-separated tool ids"),
    ),
    responses(
        (status = 200, description = "SSE of jobs: `job.assigned` (schema JobAssigned), \
            `job.cancelled`.", content_type = SSE, body = SseMessage),
        (status = 400, description = "Missing or over-long ids", body = Error),
        Unauthorized,
    ))]
fn runner_stream() {}

#[utoipa::path(post, path = "/v0/runners/steps/{step_id}/started", tag = "runners",
    params(("step_id" = String, Path, description = "Step id")),
    request_body = StepStarted,
    responses(
        (status = 200, description = "Recorded", body = Status),
        (status = 400, description = "Missing ids", body = Error),
        Unauthorized,
        (status = 404, description = "No such step", body = Error),
        (status = 409, description = "Step not running on this runner", body = Error),
    ))]
fn step_started() {}

#[utoipa::path(post, path = "/v0/runners/steps/{step_id}/progress", tag = "runners",
    params(("step_id" = String, Path, description = "Step id")),
    request_body = StepProgress,
    responses(
        (status = 200, description = "Recorded as `step.progress` while the step runs on this \
            runner (at most 20 per step); dropped otherwise", body = Status),
        (status = 400, description = "Missing ids or progress", body = Error),
        Unauthorized,
        (status = 404, description = "No such step", body = Error),
    ))]
fn step_progress() {}

#[utoipa::path(delete, path = "/v0/runners/{id}", tag = "runners",
    params(("id" = String, Path, description = "Runner id")),
    responses(
        (status = 204, description = "Unregistered"),
        BadPath,
        Unauthorized,
        (status = 404, description = "No such runner", body = Error),
    ))]
fn unregister_runner() {}

#[utoipa::path(post, path = "/v0/runners/{id}/results", tag = "runners",
    params(("id" = String, Path, description = "Runner id")),
    request_body = RunnerResult,
    responses(
        (status = 200, description = "Recorded", body = Status),
        (status = 400, description = "Missing ids or bad timestamps", body = Error),
        Unauthorized,
        (status = 404, description = "No such step", body = Error),
        (status = 409, description = "Step already resolved", body = Error),
    ))]
fn runner_result() {}

#[utoipa::path(post, path = "/v0/runners/{id}/capabilities", tag = "runners",
    params(("id" = String, Path, description = "Runner id")),
    request_body = Capabilities,
    responses(
        (status = 200, description = "Replaced", body = Status),
        (status = 400, description = "Invalid body", body = Error),
        Unauthorized,
    ))]
fn runner_capabilities() {}

#[utoipa::path(post, path = "/v0/runners/{id}/tools", tag = "runners",
    params(("id" = String, Path, description = "Runner id")),
    request_body = PublishTools,
    responses(
        (status = 204, description = "Published (replaces the runner's earlier schemas)"),
        (status = 400, description = "Invalid body", body = Error),
        Unauthorized,
    ))]
fn publish_tools() {}

#[utoipa::path(get, path = "/v0/tools", tag = "runners",
    params(("prefix" = Option<String>, Query,
        description = "Only ids equal to it or starting with `prefix_`")),
    responses(
        (status = 200, description = "The tool directory (always an array)", body = Vec<Tool>),
        (status = 400, description = "Invalid query", body = Error),
        Unauthorized,
    ))]
fn tools() {}
