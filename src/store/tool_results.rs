//! `Store::tool_results_since` and `Store::runner_results_since` for both backends: the step
//! results recorded since a time, read from the event log, for rebuilding the circuit breakers
//! at startup. `step.completed` is a success, `step.failed` and `step.timed_out` failures; the
//! tool comes from the step row. A runner's results are those of jobs it claimed: the runner
//! is the one named by the step's last `step.dispatched` or `step.started` before the result
//! (the steps row keeps only the latest attempt's runner, and a retry clears it).
//!
//! The reads run once at startup (and when a reload changes the breakers), only when the
//! policy has circuit breakers of that kind, over the partial index `events_step_result_time`
//! (result events by time, migration 0005); each runner result looks back through its own
//! execution's events (the `(execution_id, sequence)` key).

use sqlx::{PgPool, SqlitePool};

use keel_actors::error::StoreError;
use keel_actors::store::{RunnerToolResult, ToolResult};
use keel_actors::time::{self, Timestamp};

use super::map_sqlx_error;
use keel_actors::ids::{RunnerId, ToolId};

/// The query, with `{since}` standing for the bound time and `{time}` for the selected one.
pub(super) const TEMPLATE: &str = "SELECT s.tool_id, e.type, {time} AS at \
     FROM events AS e \
     JOIN steps AS s ON s.id = e.step_id \
     WHERE (e.type = 'step.completed' OR e.type = 'step.failed' OR e.type = 'step.timed_out') \
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

/// The runner results query: `{since}` the bound time, `{time}` the selected one, `{runner}`
/// the `runner_id` of `d.payload` and `{error}` the `error` of `e.payload`. The `IN` list of
/// the partial index is repeated as written so that both backends use the index; timeouts are
/// then left out, and so are the failures of runners that went away.
pub(super) const RUNNER_TEMPLATE: &str = "SELECT r.runner_id, r.type, r.at FROM (\
     SELECT e.type AS type, {time} AS at, e.timestamp AS ts, e.position AS position, \
     (SELECT NULLIF({runner}, '') FROM events AS d \
     WHERE d.execution_id = e.execution_id AND d.step_id = e.step_id \
     AND d.sequence < e.sequence AND d.type IN ('step.dispatched', 'step.started') \
     ORDER BY d.sequence DESC LIMIT 1) AS runner_id \
     FROM events AS e \
     WHERE (e.type = 'step.completed' OR e.type = 'step.failed' OR e.type = 'step.timed_out') \
     AND e.type <> 'step.timed_out' AND e.timestamp >= {since} \
     AND NOT (e.type = 'step.failed' AND COALESCE({error}, '') LIKE '{lost}%')\
     ) AS r WHERE r.runner_id IS NOT NULL ORDER BY r.ts, r.position";

/// Fills the runner query for one backend.
fn runner_sql(time: &str, runner: &str, error: &str, since: &str) -> String {
    RUNNER_TEMPLATE
        .replace("{time}", time)
        .replace("{runner}", runner)
        .replace("{error}", error)
        .replace("{since}", since)
        .replace("{lost}", keel_actors::execution::RUNNER_LOST_ERROR)
}

/// Reads the runner results from a SQLite database.
pub(super) async fn sqlite_runners(
    readers: &SqlitePool,
    since: Timestamp,
) -> Result<Vec<RunnerToolResult>, StoreError> {
    let sql = runner_sql(
        "e.timestamp",
        "json_extract(d.payload, '$.runner_id')",
        "json_extract(e.payload, '$.error')",
        "?",
    );
    let rows = sqlx::query_as::<_, Row>(&sql)
        .bind(time::format(&since))
        .fetch_all(readers)
        .await
        .map_err(map_sqlx_error)?;
    runner_rows(rows)
}

/// Builds the PostgreSQL runner read; the caller bounds it like every other read.
pub(super) async fn postgres_runners(
    readers: &PgPool,
    since: Timestamp,
) -> Result<Vec<Row>, sqlx::Error> {
    let sql = runner_sql(
        "to_char(e.timestamp AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')",
        &super::pg_json_text("d.payload", "runner_id"),
        &super::pg_json_text("e.payload", "error"),
        "$1::timestamptz",
    );
    sqlx::query_as::<_, Row>(&sql)
        .bind(time::format(&since))
        .fetch_all(readers)
        .await
}

/// Converts runner rows read by either backend (runner, event type, time).
pub(super) fn runner_rows(rows: Vec<Row>) -> Result<Vec<RunnerToolResult>, StoreError> {
    let results = self::rows(rows)?;
    Ok(results
        .into_iter()
        .map(|result| RunnerToolResult {
            runner_id: RunnerId::new(result.tool_id.into_string()),
            success: result.success,
            at: result.at,
        })
        .collect())
}
