//! `Store::tool_calls_since` for both backends: the tool calls the policy allowed since a time,
//! read from the event log. An allowed `invoke_tool` writes `step.created` without a following
//! `step.approval_required` (approval-gated steps never count toward a rate limit), and a call a
//! re-run answered from the journal (`replay_of`) ran nothing and does not count either. The
//! `events_step_created_time` partial index (migration 0002) finds the events by time; the
//! agent comes from the execution row and the tool from the step row.

use sqlx::{PgPool, SqlitePool};

use keel_actors::error::StoreError;
use keel_actors::store::AllowedToolCall;
use keel_actors::time::{self, Timestamp};

use super::map_sqlx_error;
use keel_actors::ids::{AgentId, ToolId};

/// The query, with `{since}` standing for the bound time and `{time}` for the selected one.
const TEMPLATE: &str = "SELECT x.agent_id, s.tool_id, {time} AS at \
     FROM events AS e \
     JOIN executions AS x ON x.id = e.execution_id \
     JOIN steps AS s ON s.id = e.step_id \
     WHERE e.type = 'step.created' AND e.timestamp >= {since} \
     AND NOT EXISTS (SELECT 1 FROM events AS a WHERE a.execution_id = e.execution_id \
     AND a.step_id = e.step_id AND a.type = 'step.approval_required') \
     AND {not_replay} \
     ORDER BY e.timestamp, e.position";

/// One result row: agent, tool, RFC 3339 time.
pub(super) type Row = (String, String, String);

/// Reads the calls from a SQLite database (times are RFC 3339 text; text order is time order).
pub(super) async fn sqlite(
    readers: &SqlitePool,
    since: Timestamp,
) -> Result<Vec<AllowedToolCall>, StoreError> {
    let sql = TEMPLATE
        .replace("{time}", "e.timestamp")
        .replace("{since}", "?")
        .replace(
            "{not_replay}",
            "json_extract(e.payload, '$.replay_of') IS NULL",
        );
    let rows = sqlx::query_as::<_, Row>(&sql)
        .bind(time::format(&since))
        .fetch_all(readers)
        .await
        .map_err(map_sqlx_error)?;
    rows.into_iter().map(into_call).collect()
}

/// Builds the PostgreSQL read (times are `TIMESTAMPTZ`, rendered as UTC text); the caller
/// bounds it like every other read.
pub(super) async fn postgres(readers: &PgPool, since: Timestamp) -> Result<Vec<Row>, sqlx::Error> {
    let sql = TEMPLATE
        .replace(
            "{time}",
            "to_char(e.timestamp AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')",
        )
        .replace("{since}", "$1::timestamptz")
        .replace("{not_replay}", "(e.payload ->> 'replay_of') IS NULL");
    sqlx::query_as::<_, Row>(&sql)
        .bind(time::format(&since))
        .fetch_all(readers)
        .await
}

/// Converts PostgreSQL rows read by [`postgres`].
pub(super) fn postgres_calls(rows: Vec<Row>) -> Result<Vec<AllowedToolCall>, StoreError> {
    rows.into_iter().map(into_call).collect()
}

fn into_call((agent_id, tool_id, at): Row) -> Result<AllowedToolCall, StoreError> {
    let at = chrono::DateTime::parse_from_rfc3339(&at)
        .map(|parsed| parsed.with_timezone(&chrono::Utc))
        .map_err(|error| {
            StoreError::Internal(format!(
                "events.timestamp {at:?} is not an rfc 3339 time: {error}"
            ))
        })?;
    Ok(AllowedToolCall {
        agent_id: AgentId::new(agent_id),
        tool_id: ToolId::new(tool_id),
        at,
    })
}
