//! Queue depths for `/metrics`, for both backends: pending executions per agent with the
//! creation time of the oldest (the `executions_pending_agent` index of migration 0003), and
//! remote steps per tool that no runner has started yet.

use sqlx::{PgPool, SqlitePool};

use keel_actors::error::StoreError;
use keel_actors::store::QueueDepths;
use keel_actors::time::Timestamp;

use super::map_sqlx_error;
use keel_actors::ids::{AgentId, ToolId};

/// Pending executions per agent; `{oldest}` renders the oldest creation time, `{pending}` is
/// the backend's spelling of pending.
const PENDING: &str = "SELECT agent_id, COUNT(*), {oldest} FROM executions \
     WHERE {pending} GROUP BY agent_id";
/// Remote steps no runner has started yet, per tool: waiting in the dispatcher's queue (status
/// `dispatched` with no runner; a delivered job gets its runner with `step.started`), for a
/// retry delay or for an approval (`pending`).
pub(super) const QUEUED: &str = "SELECT tool_id, COUNT(*) FROM steps \
     WHERE status IN ('pending', 'dispatched') AND COALESCE(runner_id, '') = '' \
     AND {remote} GROUP BY tool_id";

/// SQLite (timestamps are RFC 3339 text).
pub(super) async fn sqlite(readers: &SqlitePool) -> Result<QueueDepths, StoreError> {
    let pending = sqlx::query_as::<_, (String, i64, String)>(&pending_sql("MIN(created_at)"))
        .fetch_all(readers)
        .await
        .map_err(map_sqlx_error)?;
    let queued = sqlx::query_as::<_, (String, i64)>(&QUEUED.replace("{remote}", "remote = 1"))
        .fetch_all(readers)
        .await
        .map_err(map_sqlx_error)?;
    let pending_by_agent = pending
        .into_iter()
        .filter_map(|(agent, count, oldest)| {
            let oldest = chrono::DateTime::parse_from_rfc3339(&oldest).ok()?;
            Some((
                AgentId::new(agent),
                count_of(count),
                oldest.with_timezone(&chrono::Utc),
            ))
        })
        .collect();
    Ok(QueueDepths {
        pending_by_agent,
        queued_by_tool: counts(queued),
    })
}

/// PostgreSQL (the caller bounds the read); the oldest creation time in microseconds.
pub(super) async fn postgres(readers: &PgPool) -> Result<QueueDepths, sqlx::Error> {
    let oldest = "(EXTRACT(EPOCH FROM MIN(created_at)) * 1000000)::BIGINT";
    let pending = sqlx::query_as::<_, (String, i64, i64)>(&pending_sql(oldest))
        .fetch_all(readers)
        .await?;
    let queued = sqlx::query_as::<_, (String, i64)>(&QUEUED.replace("{remote}", "remote"))
        .fetch_all(readers)
        .await?;
    Ok(QueueDepths {
        pending_by_agent: pending
            .into_iter()
            .filter_map(|(agent, count, micros)| {
                let oldest: Timestamp = chrono::DateTime::from_timestamp_micros(micros)?;
                Some((AgentId::new(agent), count_of(count), oldest))
            })
            .collect(),
        queued_by_tool: counts(queued),
    })
}

/// The pending query in a backend's words: how it renders the oldest creation time (pending is
/// spelled as the indexes of both backends read it).
fn pending_sql(oldest: &str) -> String {
    PENDING
        .replace("{oldest}", oldest)
        .replace("{pending}", super::PENDING)
}

fn count_of(count: i64) -> u64 {
    u64::try_from(count).unwrap_or(0)
}

fn counts(rows: Vec<(String, i64)>) -> Vec<(ToolId, u64)> {
    rows.into_iter()
        .map(|(key, count)| (ToolId::new(key), count_of(count)))
        .collect()
}
