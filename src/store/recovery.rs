//! The startup recovery index: every non-terminal execution with what recovery needs to decide
//! whether it gets its actor now (work in flight) or stays in the store until something
//! concerns it. One query per backend, no event is read.

use keel_actors::error::StoreError;
use keel_actors::ids::{AgentId, ConsumerId, ExecutionId, SessionId};
use keel_actors::status::ExecutionStatus;
use keel_actors::store::RecoveryEntry;

use super::rows::parse_time;

/// Non-terminal step statuses, as stored.
const LIVE_STEP_STATUSES_SQL: &str = "('pending', 'dispatched', 'running')";

/// One row of the index as both backends return it (times as RFC 3339 text).
#[derive(sqlx::FromRow)]
pub(crate) struct RecoveryRecord {
    id: String,
    agent_id: String,
    status: String,
    created_at: String,
    session_id: Option<String>,
    consumer_id: Option<String>,
    live_steps: bool,
}

impl RecoveryRecord {
    pub(crate) fn into_entry(self) -> Result<RecoveryEntry, StoreError> {
        let status = self.status.parse::<ExecutionStatus>().map_err(|value| {
            StoreError::Internal(format!(
                "execution {} has invalid status {value:?}",
                self.id
            ))
        })?;
        Ok(RecoveryEntry {
            created_at: parse_time("executions.created_at", &self.created_at)?,
            id: ExecutionId::new(self.id),
            agent_id: AgentId::new(self.agent_id),
            status,
            session_id: self.session_id.map(SessionId::new),
            consumer_id: self.consumer_id.map(ConsumerId::new),
            live_steps: self.live_steps,
        })
    }
}

/// The index query; `created_at` is the column expression that yields RFC 3339 text and
/// `non_terminal` the backend's spelling of a non-terminal `status` (it reads the
/// `executions_non_terminal` partial index, whose predicate it must match); `hint` follows the
/// table name (SQLite names that index: `INDEXED BY …`).
pub(crate) fn query(created_at: &str, non_terminal: &str, hint: &str) -> String {
    format!(
        "SELECT e.id, e.agent_id, e.status, {created_at} AS created_at, e.session_id, \
         e.consumer_id, EXISTS (SELECT 1 FROM steps AS s WHERE s.execution_id = e.id \
         AND s.status IN {LIVE_STEP_STATUSES_SQL}) AS live_steps \
         FROM executions AS e {hint} WHERE {non_terminal} ORDER BY e.created_at, e.id",
    )
}
