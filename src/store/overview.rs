//! Operator reads for both backends: execution counts by status (`GET /v0/executions/counts`)
//! and the approvals nobody answered yet (`GET /v0/approvals`). Both are read-only queries on
//! the projection and the log; neither needs an index of its own: counts read every row's
//! status on PostgreSQL, and on SQLite the phase index plus the rows of the live executions;
//! approvals start from the `blocked` executions (the
//! `active` entries of `executions_phase_list`, PostgreSQL's migration 0007 and SQLite's 0009)
//! and read their events by `(execution_id, sequence)`.

use std::str::FromStr;

use sqlx::{PgPool, Postgres, QueryBuilder, Sqlite, SqlitePool};

use keel_actors::error::StoreError;
use keel_actors::ids::{AgentId, ExecutionId, StepId};
use keel_actors::status::ExecutionStatus;
use keel_actors::store::{ListFilter, PendingApproval};

use super::map_sqlx_error;
use super::rows::parse_time;

/// Pending approvals: the `step.approval_required` events of blocked executions that no later
/// event of the same step follows (a grant dispatches the step, a denial fails it, a cancel
/// cancels it), `approval.requested` aside (written beside the request and by an escalation),
/// each with the payload of its step's latest `approval.requested` (the escalated one after an
/// escalation). `{time}` stands for the selected time and `{limit}` for the bound limit; a
/// blocked execution is spelled as the phase index reads it, the status on top.
const APPROVALS: &str = "SELECT x.id, x.agent_id, e.step_id, {time} AS at, e.payload{text}, \
     (SELECT q.payload{text} FROM events AS q WHERE q.execution_id = e.execution_id \
     AND q.sequence > e.sequence AND q.step_id = e.step_id AND q.type = 'approval.requested' \
     ORDER BY q.sequence DESC LIMIT 1) AS latest \
     FROM executions AS x \
     JOIN events AS e ON e.execution_id = x.id \
     WHERE x.phase = 'active' AND x.status = 'blocked' AND e.type = 'step.approval_required' \
     AND e.step_id IS NOT NULL \
     AND NOT EXISTS (SELECT 1 FROM events AS r WHERE r.execution_id = e.execution_id \
     AND r.sequence > e.sequence AND r.step_id = e.step_id AND r.type <> 'approval.requested') \
     ORDER BY e.timestamp, e.position LIMIT {limit}";

/// One approval row: execution, agent, step, RFC 3339 time, payload JSON text, the latest
/// `approval.requested` payload JSON text.
type ApprovalRow = (String, String, String, String, String, Option<String>);

/// One count row: status, count.
type CountRow = (String, i64);

/// Counts executions by status in a SQLite database. Every phase but `active` is a status of its
/// own, so those are counted from `executions_phase_list` alone (migration 0009); only the live
/// executions are read row by row, to tell running from blocked.
pub(super) async fn sqlite_counts(
    readers: &SqlitePool,
    filter: &ListFilter,
) -> Result<Vec<(ExecutionStatus, u64)>, StoreError> {
    let mut query = QueryBuilder::<Sqlite>::new(
        "SELECT e.phase, COUNT(*) FROM executions AS e WHERE e.phase <> 'active'",
    );
    super::filter::push_agent_and_labels(&mut query, filter);
    query.push(
        " GROUP BY e.phase UNION ALL SELECT e.status, COUNT(*) FROM executions AS e \
         WHERE e.phase = 'active'",
    );
    super::filter::push_agent_and_labels(&mut query, filter);
    query.push(" GROUP BY e.status");
    let rows = query
        .build_query_as::<CountRow>()
        .fetch_all(readers)
        .await
        .map_err(map_sqlx_error)?;
    into_counts(rows)
}

/// Builds the PostgreSQL count query; the caller bounds it like every other read.
pub(super) async fn postgres_counts(
    readers: &PgPool,
    filter: &ListFilter,
) -> Result<Vec<CountRow>, sqlx::Error> {
    // PostgreSQL text cannot hold NUL: such a filter matches nothing.
    let texts = filter.agent_id.iter().map(AgentId::as_str).chain(
        filter
            .labels
            .iter()
            .flat_map(|(key, value)| [key.as_str(), value.as_str()]),
    );
    if texts.into_iter().any(|text| text.contains('\0')) {
        return Ok(Vec::new());
    }
    let mut query =
        QueryBuilder::<Postgres>::new("SELECT e.status, COUNT(*) FROM executions AS e WHERE TRUE");
    super::filter::push_agent_and_labels(&mut query, filter);
    query.push(" GROUP BY e.status");
    query.build_query_as::<CountRow>().fetch_all(readers).await
}

/// Converts count rows; an unknown status in the database is an internal error.
pub(super) fn into_counts(rows: Vec<CountRow>) -> Result<Vec<(ExecutionStatus, u64)>, StoreError> {
    rows.into_iter()
        .map(|(status, count)| {
            let status = ExecutionStatus::from_str(&status).map_err(|_| {
                StoreError::Internal(format!("executions.status {status:?} is not a status"))
            })?;
            Ok((status, u64::try_from(count).unwrap_or(0)))
        })
        .collect()
}

/// Reads the pending approvals from a SQLite database.
pub(super) async fn sqlite_approvals(
    readers: &SqlitePool,
    limit: i64,
) -> Result<Vec<PendingApproval>, StoreError> {
    let sql = APPROVALS
        .replace("{time}", "e.timestamp")
        .replace("{text}", "")
        .replace("{limit}", "?");
    let rows = sqlx::query_as::<_, ApprovalRow>(&sql)
        .bind(limit.max(0))
        .fetch_all(readers)
        .await
        .map_err(map_sqlx_error)?;
    into_approvals(rows)
}

/// Builds the PostgreSQL approvals read; the caller bounds it like every other read.
pub(super) async fn postgres_approvals(
    readers: &PgPool,
    limit: i64,
) -> Result<Vec<ApprovalRow>, sqlx::Error> {
    let sql = APPROVALS
        .replace(
            "{time}",
            "to_char(e.timestamp AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')",
        )
        .replace("{text}", "::text")
        .replace("{limit}", "$1");
    sqlx::query_as::<_, ApprovalRow>(&sql)
        .bind(limit.max(0))
        .fetch_all(readers)
        .await
}

/// Converts approval rows read by either backend.
pub(super) fn into_approvals(rows: Vec<ApprovalRow>) -> Result<Vec<PendingApproval>, StoreError> {
    rows.into_iter()
        .map(|(execution_id, agent_id, step_id, at, payload, latest)| {
            let json = |text: &str| {
                serde_json::from_str(text).map_err(|error| {
                    StoreError::Internal(format!("events.payload is not valid json: {error}"))
                })
            };
            let request = json(&payload)?;
            let latest_request = latest.as_deref().map(json).transpose()?;
            Ok(PendingApproval {
                execution_id: ExecutionId::new(execution_id),
                agent_id: AgentId::new(agent_id),
                step_id: StepId::new(step_id),
                request,
                requested_at: parse_time("events.timestamp", &at)?,
                latest_request,
            })
        })
        .collect()
}
