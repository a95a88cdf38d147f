//! Reads for creation guardrails, for both backends: the execution created with an
//! `Idempotency-Key` (the key is the idempotency key of its `execution.created` event, unique
//! through the `events_creation_key` index of migration 0003), and an agent's pending queue
//! with the `priority` of each `execution.created` event, and an agent's running executions
//! (its running slots, docs/guardrails.md "Concurrency limits"), and the unfinished local
//! steps of a tool (its `max_concurrent_steps` for local calls).

use sqlx::{PgPool, SqlitePool};

use keel_actors::error::StoreError;
use keel_actors::ids::ExecutionId;
use keel_actors::store::{PendingEntry, RunningEntry};

use super::map_sqlx_error;
use super::rows::decode_labels;

/// The execution of a creation key; `{key}` stands for the bound key.
const BY_KEY: &str = "SELECT execution_id FROM events \
     WHERE type = 'execution.created' AND idempotency_key IS NOT NULL AND idempotency_key = {key}";

/// Pending executions of an agent, oldest first, with their labels (JSON text, or NULL);
/// `{priority}` reads the payload's priority, `{labels}` the labels column as text and
/// `{pending}` is how the indexes spell pending.
const PENDING: &str = "SELECT x.id, {priority} AS priority, {labels} AS labels \
     FROM executions AS x JOIN events AS e ON e.execution_id = x.id AND e.sequence = 1 \
     WHERE x.{pending} AND x.agent_id = {agent} ORDER BY x.created_at, x.id";

/// SQLite: the execution created with `key`.
pub(super) async fn sqlite_by_key(
    readers: &SqlitePool,
    key: &str,
) -> Result<Option<ExecutionId>, StoreError> {
    let sql = BY_KEY.replace("{key}", "?");
    let id = sqlx::query_scalar::<_, String>(&sql)
        .bind(key)
        .fetch_optional(readers)
        .await
        .map_err(map_sqlx_error)?;
    Ok(id.map(ExecutionId::new))
}

/// One pending row: id, priority, labels.
pub(super) type PendingRow = (String, i64, Option<String>);

/// SQLite: an agent's pending queue.
pub(super) async fn sqlite_pending(
    readers: &SqlitePool,
    agent_id: &str,
) -> Result<Vec<PendingEntry>, StoreError> {
    let sql = PENDING
        .replace(
            "{priority}",
            "COALESCE(CAST(json_extract(e.payload, '$.priority') AS INTEGER), 0)",
        )
        .replace("{labels}", "x.labels")
        .replace("{pending}", super::PENDING)
        .replace("{agent}", "?");
    let rows = sqlx::query_as::<_, PendingRow>(&sql)
        .bind(agent_id)
        .fetch_all(readers)
        .await
        .map_err(map_sqlx_error)?;
    into_queue(rows)
}

/// PostgreSQL: the execution created with `key` (the caller bounds the read).
pub(super) async fn postgres_by_key(
    readers: &PgPool,
    key: &str,
) -> Result<Option<String>, sqlx::Error> {
    let sql = BY_KEY.replace("{key}", "$1");
    sqlx::query_scalar::<_, String>(&sql)
        .bind(key)
        .fetch_optional(readers)
        .await
}

/// PostgreSQL: an agent's pending queue (the caller bounds the read).
pub(super) async fn postgres_pending(
    readers: &PgPool,
    agent_id: &str,
) -> Result<Vec<PendingRow>, sqlx::Error> {
    let priority = format!(
        "COALESCE(({})::BIGINT, 0)",
        super::pg_json_text("e.payload", "priority")
    );
    let sql = PENDING
        .replace("{priority}", &priority)
        .replace("{labels}", "x.labels::text")
        .replace("{pending}", super::PENDING)
        .replace("{agent}", "$1");
    sqlx::query_as::<_, PendingRow>(&sql)
        .bind(agent_id)
        .fetch_all(readers)
        .await
}

/// Pending executions, of one agent when `{agent}` is bound (the `executions_pending_agent`
/// index), else kernel-wide (`executions_phase_list`: PostgreSQL's migration 0007, SQLite's
/// 0009); `{pending}` is how those indexes spell pending.
const COUNT_AGENT: &str = "SELECT COUNT(*) FROM executions WHERE {pending} AND agent_id = {agent}";
const COUNT_ALL: &str = "SELECT COUNT(*) FROM executions WHERE {pending}";

/// One of the count queries with pending spelled as the indexes read it and the first
/// parameter in the backend's words.
fn count_sql(template: &str, parameter: &str) -> String {
    template
        .replace("{pending}", super::PENDING)
        .replace("{agent}", parameter)
}

/// SQLite: the number of pending executions.
pub(super) async fn sqlite_count(
    readers: &SqlitePool,
    agent_id: Option<&str>,
) -> Result<u64, StoreError> {
    let count = match agent_id {
        Some(agent) => {
            sqlx::query_scalar::<_, i64>(&count_sql(COUNT_AGENT, "?"))
                .bind(agent)
                .fetch_one(readers)
                .await
        }
        None => {
            sqlx::query_scalar::<_, i64>(&count_sql(COUNT_ALL, "?"))
                .fetch_one(readers)
                .await
        }
    }
    .map_err(map_sqlx_error)?;
    Ok(u64::try_from(count).unwrap_or(0))
}

/// PostgreSQL: the number of pending executions (the caller bounds the read).
pub(super) async fn postgres_count(
    readers: &PgPool,
    agent_id: Option<&str>,
) -> Result<i64, sqlx::Error> {
    match agent_id {
        Some(agent) => {
            sqlx::query_scalar::<_, i64>(&count_sql(COUNT_AGENT, "$1"))
                .bind(agent)
                .fetch_one(readers)
                .await
        }
        None => {
            sqlx::query_scalar::<_, i64>(&count_sql(COUNT_ALL, "$1"))
                .fetch_one(readers)
                .await
        }
    }
}

/// Converts pending rows of either backend.
pub(super) fn into_queue(rows: Vec<PendingRow>) -> Result<Vec<PendingEntry>, StoreError> {
    rows.into_iter()
        .map(|(id, priority, labels)| {
            Ok(PendingEntry {
                id: ExecutionId::new(id),
                priority,
                labels: labels.as_deref().map(decode_labels).transpose()?,
            })
        })
        .collect()
}

/// Executions of an agent that hold a running slot, with their labels (over
/// `executions_agent_list`); `{labels}` reads the labels column as text.
const RUNNING: &str = "SELECT id, {labels} AS labels FROM executions \
     WHERE agent_id = {agent} AND status IN ('running', 'blocked') ORDER BY id";

/// One running row: id, labels.
pub(super) type RunningRow = (String, Option<String>);

/// SQLite: an agent's running and blocked executions.
pub(super) async fn sqlite_running(
    readers: &SqlitePool,
    agent_id: &str,
) -> Result<Vec<RunningEntry>, StoreError> {
    let sql = RUNNING
        .replace("{labels}", "labels")
        .replace("{agent}", "?");
    let rows = sqlx::query_as::<_, RunningRow>(&sql)
        .bind(agent_id)
        .fetch_all(readers)
        .await
        .map_err(map_sqlx_error)?;
    into_running(rows)
}

/// PostgreSQL: an agent's running and blocked executions (the caller bounds the read).
pub(super) async fn postgres_running(
    readers: &PgPool,
    agent_id: &str,
) -> Result<Vec<RunningRow>, sqlx::Error> {
    let sql = RUNNING
        .replace("{labels}", "labels::text")
        .replace("{agent}", "$1");
    sqlx::query_as::<_, RunningRow>(&sql)
        .bind(agent_id)
        .fetch_all(readers)
        .await
}

/// Converts running rows of either backend.
pub(super) fn into_running(rows: Vec<RunningRow>) -> Result<Vec<RunningEntry>, StoreError> {
    rows.into_iter()
        .map(|(id, labels)| {
            Ok(RunningEntry {
                id: ExecutionId::new(id),
                labels: labels.as_deref().map(decode_labels).transpose()?,
            })
        })
        .collect()
}

/// Unfinished local steps of a tool (over `steps_active_local`, migrations 0005 and 0006); `{local}`
/// is the backend's spelling of `remote` being false.
pub(super) const LOCAL_STEPS: &str = "SELECT COUNT(*) FROM steps \
     WHERE tool_id = {tool} \
     AND (status = 'pending' OR status = 'dispatched' OR status = 'running') AND {local}";

/// SQLite: the unfinished local steps of a tool.
pub(super) async fn sqlite_local_steps(
    readers: &SqlitePool,
    tool_id: &str,
) -> Result<u64, StoreError> {
    let sql = LOCAL_STEPS
        .replace("{tool}", "?")
        .replace("{local}", "remote = 0");
    let count = sqlx::query_scalar::<_, i64>(&sql)
        .bind(tool_id)
        .fetch_one(readers)
        .await
        .map_err(map_sqlx_error)?;
    Ok(u64::try_from(count).unwrap_or(0))
}

/// PostgreSQL: the unfinished local steps of a tool (the caller bounds the read).
pub(super) async fn postgres_local_steps(
    readers: &PgPool,
    tool_id: &str,
) -> Result<i64, sqlx::Error> {
    let sql = LOCAL_STEPS
        .replace("{tool}", "$1")
        .replace("{local}", "NOT remote");
    sqlx::query_scalar::<_, i64>(&sql)
        .bind(tool_id)
        .fetch_one(readers)
        .await
}
