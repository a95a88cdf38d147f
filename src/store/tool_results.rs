//! `Store::tool_results_since` for both backends: the step results recorded since a time, read
//! from the event log, for rebuilding the circuit breakers at startup. `step.completed` is a
//! success, `step.failed` and `step.timed_out` failures; the tool comes from the step row.
//!
//! The read runs once at startup (and when a reload lengthens the breakers' horizon), only when
//! the policy has circuit breakers, over the partial index `events_step_result_time` (result
//! events by time, migration 0005).

use sqlx::{PgPool, SqlitePool};

use keel_actors::error::StoreError;
use keel_actors::store::ToolResult;
use keel_actors::time::{self, Timestamp};

use super::map_sqlx_error;
use keel_actors::ids::ToolId;

/// The query, with `{since}` standing for the bound time and `{time}` for the selected one.
pub(super) const TEMPLATE: &str = "SELECT s.tool_id, e.type, {time} AS at \
     FROM events AS e \
     JOIN steps AS s ON s.id = e.step_id \
     WHERE e.type IN ('step.completed', 'step.failed', 'step.timed_out') \
     AND e.timestamp >= {since} \
     ORDER BY e.timestamp, e.position";

/// One result row: tool, event type, RFC 3339 time.
pub(super) type Row = (String, String, String);

/// Reads the results from a SQLite database (times are RFC 3339 text; text order is time
/// order).
pub(super) async fn sqlite(
    readers: &SqlitePool,
    since: Timestamp,
) -> Result<Vec<ToolResult>, StoreError> {
    let sql = TEMPLATE
        .replace("{time}", "e.timestamp")
        .replace("{since}", "?");
    let rows = sqlx::query_as::<_, Row>(&sql)
        .bind(time::format(&since))
        .fetch_all(readers)
        .await
        .map_err(map_sqlx_error)?;
    self::rows(rows)
}

/// Builds the PostgreSQL read (times are `TIMESTAMPTZ`, rendered as UTC text); the caller
/// bounds it like every other read.
pub(super) async fn postgres(readers: &PgPool, since: Timestamp) -> Result<Vec<Row>, sqlx::Error> {
    let sql = TEMPLATE
        .replace(
            "{time}",
            "to_char(e.timestamp AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')",
        )
        .replace("{since}", "$1::timestamptz");
    sqlx::query_as::<_, Row>(&sql)
        .bind(time::format(&since))
        .fetch_all(readers)
        .await
}

/// Converts rows read by either backend.
pub(super) fn rows(rows: Vec<Row>) -> Result<Vec<ToolResult>, StoreError> {
    rows.into_iter()
        .map(|(tool_id, kind, at)| {
            let at = chrono::DateTime::parse_from_rfc3339(&at)
                .map(|parsed| parsed.with_timezone(&chrono::Utc))
                .map_err(|error| {
                    StoreError::Internal(format!(
                        "events.timestamp {at:?} is not an rfc 3339 time: {error}"
                    ))
                })?;
            Ok(ToolResult {
                tool_id: ToolId::new(tool_id),
                success: kind == "step.completed",
                at,
            })
        })
        .collect()
}
