//! An in-memory [`Store`] with failure injection: commits that fail, commits that land but
//! report failure (a connection lost during `COMMIT`), reads that fail, and a store that
//! never answers. The scans behind its derived reads (recovery, guardrail windows, counts,
//! approvals) are in `views.rs`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;

use crate::error::StoreError;
use crate::events::Event;
use crate::ids::{AgentId, ExecutionId, ToolId};
use crate::store::{AllowedToolCall, Commit, ExecutionRow, ListFilter, Store};
use crate::time::Timestamp;

mod views;

#[derive(Default)]
struct Tables {
    events: HashMap<ExecutionId, Vec<Event>>,
    executions: HashMap<ExecutionId, ExecutionRow>,
    /// Status of each step, by execution and step id.
    steps: HashMap<ExecutionId, HashMap<crate::ids::StepId, crate::store::StepRow>>,
    commits: usize,
}

/// An in-memory store. `fail_commits(true)` makes every commit fail as if the database were
/// gone, without changing anything.
#[derive(Default)]
pub struct MemoryStore {
    tables: Mutex<Tables>,
    failing: AtomicBool,
    losing_answers: AtomicBool,
    failing_reads: AtomicBool,
}

impl MemoryStore {
    /// Makes commits fail (`true`) or succeed again (`false`).
    pub fn fail_commits(&self, failing: bool) {
        self.failing.store(failing, Ordering::SeqCst);
    }

    /// Makes commits land but report failure (`true`), as when the connection dies during
    /// `COMMIT`.
    pub fn lose_commit_answers(&self, losing: bool) {
        self.losing_answers.store(losing, Ordering::SeqCst);
    }

    /// Makes event reads (an execution's events, the allowed tool calls of a period) fail
    /// (`true`) as if the database were gone, or succeed again.
    pub fn fail_reads(&self, failing: bool) {
        self.failing_reads.store(failing, Ordering::SeqCst);
    }

    /// Returns every event of an execution.
    pub fn all_events(&self, id: &ExecutionId) -> Vec<Event> {
        self.lock().events.get(id).cloned().unwrap_or_default()
    }

    /// Returns the number of successful commit calls (transactions).
    pub fn transactions(&self) -> usize {
        self.lock().commits
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Tables> {
        self.tables
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[async_trait]
impl Store for MemoryStore {
    async fn commit(&self, batch: &[Commit]) -> Result<(), StoreError> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(StoreError::Unavailable("injected failure".into()));
        }
        let mut tables = self.lock();
        for commit in batch {
            let stored = tables.events.get(&commit.execution.id).map_or(0, Vec::len) as i64;
            if commit
                .events
                .first()
                .is_some_and(|event| event.sequence != stored + 1)
            {
                return Err(StoreError::Conflict("sequence already taken".into()));
            }
            let created_key = commit.events.iter().find_map(|event| match event.body {
                crate::events::EventBody::ExecutionCreated { .. } => {
                    event.idempotency_key.as_deref()
                }
                _ => None,
            });
            if let Some(key) = created_key {
                let taken = tables.events.values().any(|events| {
                    events
                        .first()
                        .is_some_and(|first| first.idempotency_key.as_deref() == Some(key))
                });
                if taken {
                    return Err(StoreError::Conflict("creation key already taken".into()));
                }
            }
        }
        for commit in batch {
            tables
                .events
                .entry(commit.execution.id.clone())
                .or_default()
                .extend(commit.events.iter().cloned());
            tables
                .executions
                .insert(commit.execution.id.clone(), commit.execution.clone());
            let steps = tables.steps.entry(commit.execution.id.clone()).or_default();
            for step in &commit.steps {
                steps.insert(step.id.clone(), step.clone());
            }
        }
        tables.commits += 1;
        if self.losing_answers.load(Ordering::SeqCst) {
            return Err(StoreError::Unavailable("injected lost answer".into()));
        }
        Ok(())
    }

    async fn events(
        &self,
        id: &ExecutionId,
        after_sequence: i64,
        limit: i64,
    ) -> Result<Vec<Event>, StoreError> {
        if self.failing_reads.load(Ordering::SeqCst) {
            return Err(StoreError::Unavailable("injected read failure".into()));
        }
        let tables = self.lock();
        let events = tables.events.get(id).map(Vec::as_slice).unwrap_or_default();
        let limit = usize::try_from(limit).unwrap_or(0);
        Ok(events
            .iter()
            .filter(|event| event.sequence > after_sequence)
            .take(limit)
            .cloned()
            .collect())
    }

    async fn execution(&self, id: &ExecutionId) -> Result<Option<ExecutionRow>, StoreError> {
        Ok(self.lock().executions.get(id).cloned())
    }

    async fn list_executions(&self, filter: &ListFilter) -> Result<Vec<ExecutionRow>, StoreError> {
        let tables = self.lock();
        let mut rows: Vec<ExecutionRow> = tables
            .executions
            .values()
            .filter(|row| filter.status.is_none_or(|status| row.status == status))
            .filter(|row| {
                filter
                    .agent_id
                    .as_ref()
                    .is_none_or(|agent| row.agent_id == *agent)
            })
            .filter(|row| {
                filter.labels.iter().all(|(key, value)| {
                    row.labels
                        .as_ref()
                        .and_then(|labels| labels.get(key))
                        .is_some_and(|found| found == value)
                })
            })
            .filter(|row| {
                filter
                    .after
                    .as_ref()
                    .is_none_or(|(at, id)| (row.created_at, row.id.as_str()) < (*at, id.as_str()))
            })
            .cloned()
            .collect();
        rows.sort_by(|left, right| (right.created_at, &right.id).cmp(&(left.created_at, &left.id)));
        rows.truncate(usize::try_from(filter.limit).unwrap_or(0));
        Ok(rows)
    }

    async fn non_terminal_executions(&self) -> Result<Vec<ExecutionId>, StoreError> {
        let tables = self.lock();
        let mut rows: Vec<&ExecutionRow> = tables
            .executions
            .values()
            .filter(|row| !row.status.is_terminal())
            .collect();
        rows.sort_by_key(|row| row.created_at);
        Ok(rows.into_iter().map(|row| row.id.clone()).collect())
    }

    async fn execution_by_creation_key(
        &self,
        key: &str,
    ) -> Result<Option<ExecutionId>, StoreError> {
        let tables = self.lock();
        Ok(tables
            .events
            .iter()
            .find(|(_, events)| {
                events.first().is_some_and(|event| {
                    matches!(
                        event.body,
                        crate::events::EventBody::ExecutionCreated { .. }
                    ) && event.idempotency_key.as_deref() == Some(key)
                })
            })
            .map(|(id, _)| id.clone()))
    }

    async fn pending_count(&self, agent_id: Option<&AgentId>) -> Result<u64, StoreError> {
        let tables = self.lock();
        Ok(tables
            .executions
            .values()
            .filter(|row| row.status == crate::status::ExecutionStatus::Pending)
            .filter(|row| agent_id.is_none_or(|agent| row.agent_id == *agent))
            .count() as u64)
    }

    async fn active_local_steps(&self, tool_id: &ToolId) -> Result<u64, StoreError> {
        let tables = self.lock();
        Ok(tables
            .steps
            .values()
            .flat_map(HashMap::values)
            .filter(|step| step.tool_id == tool_id && !step.remote && !step.status.is_terminal())
            .count() as u64)
    }

    async fn running_executions(
        &self,
        agent_id: &AgentId,
    ) -> Result<Vec<crate::store::RunningEntry>, StoreError> {
        let tables = self.lock();
        let mut found: Vec<crate::store::RunningEntry> = tables
            .executions
            .values()
            .filter(|row| {
                matches!(
                    row.status,
                    crate::status::ExecutionStatus::Running
                        | crate::status::ExecutionStatus::Blocked
                ) && row.agent_id == *agent_id
            })
            .map(|row| crate::store::RunningEntry {
                id: row.id.clone(),
                labels: row.labels.as_deref().cloned(),
            })
            .collect();
        found.sort_by(|left, right| left.id.cmp(&right.id));
        Ok(found)
    }

    async fn pending_queue(
        &self,
        agent_id: &AgentId,
    ) -> Result<Vec<crate::store::PendingEntry>, StoreError> {
        let tables = self.lock();
        let mut rows: Vec<&ExecutionRow> = tables
            .executions
            .values()
            .filter(|row| {
                row.status == crate::status::ExecutionStatus::Pending && row.agent_id == *agent_id
            })
            .collect();
        rows.sort_by(|left, right| (left.created_at, &left.id).cmp(&(right.created_at, &right.id)));
        Ok(rows
            .into_iter()
            .map(|row| {
                let priority = tables
                    .events
                    .get(&row.id)
                    .and_then(|events| events.first())
                    .map_or(0, |event| match &event.body {
                        crate::events::EventBody::ExecutionCreated { priority, .. } => *priority,
                        _ => 0,
                    });
                crate::store::PendingEntry {
                    id: row.id.clone(),
                    priority,
                    labels: row.labels.as_deref().cloned(),
                }
            })
            .collect())
    }

    async fn recovery_index(&self) -> Result<Vec<crate::store::RecoveryEntry>, StoreError> {
        Ok(self.lock().recovery_index())
    }

    async fn delete_terminal_before(
        &self,
        before: Timestamp,
        limit: i64,
    ) -> Result<u64, StoreError> {
        let mut tables = self.lock();
        let mut doomed: Vec<(Timestamp, ExecutionId)> = tables
            .executions
            .values()
            .filter(|row| row.status.is_terminal() && row.updated_at < before)
            .map(|row| (row.updated_at, row.id.clone()))
            .collect();
        doomed.sort();
        doomed.truncate(usize::try_from(limit).unwrap_or(0));
        for (_, id) in &doomed {
            tables.executions.remove(id);
            tables.events.remove(id);
        }
        Ok(doomed.len() as u64)
    }

    async fn runner_results_since(
        &self,
        since: Timestamp,
    ) -> Result<Vec<crate::store::RunnerToolResult>, StoreError> {
        Ok(self.lock().runner_results_since(since))
    }

    async fn tool_results_since(
        &self,
        since: Timestamp,
    ) -> Result<Vec<crate::store::ToolResult>, StoreError> {
        Ok(self.lock().tool_results_since(since))
    }

    async fn tool_calls_since(&self, since: Timestamp) -> Result<Vec<AllowedToolCall>, StoreError> {
        if self.failing_reads.load(Ordering::SeqCst) {
            return Err(StoreError::Unavailable("injected read failure".into()));
        }
        Ok(self.lock().tool_calls_since(since))
    }

    async fn count_executions(
        &self,
        filter: &ListFilter,
    ) -> Result<Vec<(crate::status::ExecutionStatus, u64)>, StoreError> {
        Ok(self.lock().count_executions(filter))
    }

    async fn pending_approvals(
        &self,
        limit: i64,
    ) -> Result<Vec<crate::store::PendingApproval>, StoreError> {
        Ok(self.lock().pending_approvals(limit))
    }

    async fn ping(&self) -> Result<(), StoreError> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(StoreError::Unavailable("injected failure".into()));
        }
        Ok(())
    }
}
