//! OpenAPI of the kernel-wide event feed (docs/events.md): its two routes and its shapes.

#![allow(dead_code)] // The functions and fields only carry the attributes.

use serde_json::Value;
use utoipa::ToSchema;

use super::answers::Unauthorized;
use super::schemas::Error;

/// One event of the kernel-wide feed: the execution event envelope plus `position` and
/// `agent_id`; also the `data:` of `/v0/events/stream` and the body of webhook deliveries.
#[derive(ToSchema)]
pub struct FeedEvent {
    /// Kernel-wide position: the feed's order and resume token.
    position: i64,
    /// Agent of the event's execution.
    agent_id: String,
    /// Event id (UUIDv7).
    id: String,
    execution_id: String,
    /// Step it concerns, when step-scoped.
    #[schema(required = false)]
    step_id: Option<String>,
    /// Event type.
    #[schema(rename = "type")]
    event_type: String,
    /// Type-specific payload.
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
    /// Position in the execution's log, from 1.
    sequence: i64,
}

/// A page of `GET /v0/events`.
#[derive(ToSchema)]
pub struct FeedPage {
    events: Vec<FeedEvent>,
    /// Where the next page starts (`after_position`); past events the filters skipped.
    next_after_position: i64,
    /// Whether more events may follow at once.
    has_more: bool,
}

#[utoipa::path(get, path = "/v0/events", tag = "events",
    params(
        ("after_position" = Option<i64>, Query, description = "Only events after this position (default 0)"),
        ("limit" = Option<i64>, Query, description = "Page size, 1-1000 (default 100)"),
        ("types" = Option<String>, Query, description = "Comma-separated type patterns (`step.*`, `*.failed`)"),
        ("agent_id" = Option<String>, Query, description = "Only executions of this agent"),
        ("execution_id" = Option<String>, Query, description = "Only this execution"),
        ("label" = Option<String>, Query, description = "`key=value` (or rebuno's `key:value`), repeatable; every pair must match"),
    ),
    responses(
        (status = 200, description = "Events of every execution in position order", body = FeedPage),
        (status = 400, description = "Invalid query", body = Error),
        Unauthorized,
    ))]
pub fn feed_page() {}

#[utoipa::path(get, path = "/v0/events/stream", tag = "streams",
    params(
        ("after_position" = Option<i64>, Query, description = "Replay events after this position"),
        ("Last-Event-ID" = Option<String>, Header, description = "Resume after this position (wins over after_position)"),
        ("types" = Option<String>, Query, description = "Comma-separated type patterns"),
        ("agent_id" = Option<String>, Query, description = "Only executions of this agent"),
        ("execution_id" = Option<String>, Query, description = "Only this execution"),
        ("label" = Option<String>, Query, description = "`key=value` (or rebuno's `key:value`), repeatable"),
    ),
    responses(
        (status = 200, description = "SSE: `id: <position>`, `event: <type>`, `data: <FeedEvent>` \
            for every matching event of the log, then live ones; `:heartbeat` comments keep it \
            open. A consumer that does not keep up is cut off and resumes with Last-Event-ID.",
            content_type = "text/event-stream", body = super::schemas::SseMessage),
        (status = 400, description = "Invalid query or Last-Event-ID", body = Error),
        Unauthorized,
    ))]
pub fn feed_stream() {}
