//! The storage port. Actors depend on this trait only; `src/store/` implements it for SQLite and
//! PostgreSQL. The event log is the source of truth; the `executions` and `steps` rows are
//! projections written in the same transaction as the events that change them.

use std::sync::Arc;

use async_trait::async_trait;

use crate::error::StoreError;
use crate::events::Event;
use crate::feed::{FeedEvent, FeedQuery};
use crate::ids::{AgentId, ExecutionId, ToolId};
use crate::status::ExecutionStatus;
use crate::time::Timestamp;

mod batch;
mod rows;
pub use batch::Batch;
pub use rows::{
    AllowedToolCall, Commit, ExecutionRow, ListFilter, PendingApproval, PendingEntry, QueueDepths,
    RecoveryEntry, RunnerToolResult, RunningEntry, StepRow, StoredKey, ToolResult,
};

/// Durable storage of events and projections.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Commits the changes of several executions in one transaction: all or nothing.
    /// Fails with `Conflict` if an event's sequence is already taken.
    async fn commit(&self, batch: &[Commit]) -> Result<(), StoreError>;

    /// Commits a group of commits the caller hands over and returns one result per commit, in
    /// order. What can be written is written in one transaction; a commit that fails (a
    /// sequence conflict, a caller bug) fails alone, without failing its neighbours, and
    /// `Unavailable` fails them all. This is the store writer's group commit.
    ///
    /// The default runs [`Store::commit`] on the whole group and, when that fails for one of
    /// the commits, on each commit alone.
    async fn commit_group(&self, group: Vec<Commit>) -> Vec<Result<(), StoreError>> {
        match self.commit(&group).await {
            Ok(()) => group.iter().map(|_| Ok(())).collect(),
            Err(error) if group.len() == 1 => vec![Err(error)],
            Err(StoreError::Unavailable(reason)) => group
                .iter()
                .map(|_| Err(StoreError::Unavailable(reason.clone())))
                .collect(),
            Err(_) => {
                let mut results = Vec::with_capacity(group.len());
                for commit in &group {
                    results.push(self.commit(std::slice::from_ref(commit)).await);
                }
                results
            }
        }
    }

    /// Whether the store itself folds concurrent [`Store::commit_group`] calls into shared
    /// transactions (SQLite's writer thread folds every group waiting for it into its next
    /// one). Callers then hand each commit over as it comes, without batching of their own and
    /// without the `StoreWriter` actor's round trip; the next transaction starts the moment one
    /// ends. The default, `false`, leaves the batching to the `StoreWriter`.
    fn folds_groups(&self) -> bool {
        false
    }

    /// Hands a store that folds groups itself ([`Store::folds_groups`]) the metrics its
    /// transactions are counted in: it observes `keel_store_commit_batch_size` once per
    /// transaction, with the commits that transaction took, since only it knows how many it
    /// folded (each caller then times only its own wait). The default ignores them: the
    /// `StoreWriter` counts its groups itself.
    fn observe_transactions(&self, metrics: Arc<crate::metrics::Metrics>) {
        let _ = metrics;
    }

    /// Returns up to `limit` events of an execution with `sequence > after_sequence`, oldest first.
    async fn events(
        &self,
        id: &ExecutionId,
        after_sequence: i64,
        limit: i64,
    ) -> Result<Vec<Event>, StoreError>;

    /// Like [`Store::events`], bounded by bytes too: the batch ends once the events before
    /// the next pass `max_bytes` (see [`Batch`]), so a backlog of large events is loaded a
    /// bounded amount at a time. The SQL backends measure the stored payloads without loading
    /// the events they leave out; the default measures each event read as JSON.
    async fn events_within(
        &self,
        id: &ExecutionId,
        after_sequence: i64,
        limit: i64,
        max_bytes: i64,
    ) -> Result<Batch<Event>, StoreError> {
        let events = self.events(id, after_sequence, limit).await?;
        Ok(Batch::measured(events, limit, max_bytes))
    }

    /// Returns the projection row of an execution, if it exists.
    async fn execution(&self, id: &ExecutionId) -> Result<Option<ExecutionRow>, StoreError>;

    /// Returns executions ordered by `(created_at, id)` descending, filtered and paged.
    async fn list_executions(&self, filter: &ListFilter) -> Result<Vec<ExecutionRow>, StoreError>;

    /// Returns the ids of every execution that is not terminal, oldest first.
    async fn non_terminal_executions(&self) -> Result<Vec<ExecutionId>, StoreError>;

    /// Returns every execution that is not terminal, oldest first, as startup recovery needs it.
    async fn recovery_index(&self) -> Result<Vec<RecoveryEntry>, StoreError>;

    /// Like [`Store::recovery_index`], for the executions of the given partitions only (cluster
    /// mode: what a kernel loads when it acquires them). Stores without partitions refuse it.
    async fn recovery_index_of(
        &self,
        partitions: &[u32],
    ) -> Result<Vec<RecoveryEntry>, StoreError> {
        let _ = partitions;
        Err(StoreError::Internal(
            "this store has no partitions (cluster mode needs PostgreSQL)".into(),
        ))
    }

    /// Deletes up to `limit` terminal executions last updated before `before`, with all their
    /// rows; returns how many were deleted.
    async fn delete_terminal_before(
        &self,
        before: Timestamp,
        limit: i64,
    ) -> Result<u64, StoreError>;

    /// Returns every tool call allowed at or after `since` (steps created without an approval
    /// gate, whatever became of them later), oldest first.
    async fn tool_calls_since(&self, since: Timestamp) -> Result<Vec<AllowedToolCall>, StoreError>;

    /// Returns every step result recorded at or after `since` (`step.completed` is a success,
    /// `step.failed` and `step.timed_out` are failures), oldest first: the circuit breakers are
    /// rebuilt from these at startup.
    async fn tool_results_since(&self, since: Timestamp) -> Result<Vec<ToolResult>, StoreError>;

    /// Returns every result of a remote step recorded at or after `since` with the runner that
    /// reported it, oldest first: `step.completed` (a success) and `step.failed` (a failure)
    /// of steps whose job a runner claimed, except the failures the kernel recorded for a runner
    /// that went away (`runner disconnected`), as the live count leaves them out. The runner
    /// circuit breakers are rebuilt from these at startup.
    async fn runner_results_since(
        &self,
        since: Timestamp,
    ) -> Result<Vec<RunnerToolResult>, StoreError>;

    /// Returns the execution whose `execution.created` event carries idempotency key `key`
    /// (a creation's `Idempotency-Key`; unique among those events), if it is still stored.
    async fn execution_by_creation_key(&self, key: &str)
    -> Result<Option<ExecutionId>, StoreError>;

    /// Returns the number of `pending` executions of one agent, or of all agents for `None`.
    async fn pending_count(&self, agent_id: Option<&AgentId>) -> Result<u64, StoreError>;

    /// Returns the `pending` executions of one agent, oldest first, each with the `priority` of
    /// its `execution.created` event (0 when absent) and its labels. An agent group loads its
    /// queue from it.
    async fn pending_queue(&self, agent_id: &AgentId) -> Result<Vec<PendingEntry>, StoreError>;

    /// Returns the executions of one agent that hold a running slot: `running` or `blocked`
    /// (assigned, not terminal, not back to `pending`), by id, with their labels. An agent
    /// group counts them against the agent's `concurrency.max_running` and `concurrency.labels`
    /// when it starts.
    async fn running_executions(&self, agent_id: &AgentId)
    -> Result<Vec<RunningEntry>, StoreError>;

    /// Returns the number of local steps (run by agents) of `tool_id` that are not finished:
    /// `pending`, `dispatched` or `running`, approval-gated ones included. A local call of a
    /// tool with `max_concurrent_steps` is denied when it reaches the limit.
    async fn active_local_steps(&self, tool_id: &ToolId) -> Result<u64, StoreError>;

    /// Counts the executions matching `filter`'s agent and labels, by status (its status,
    /// cursor and limit are ignored); statuses without executions are left out.
    async fn count_executions(
        &self,
        filter: &ListFilter,
    ) -> Result<Vec<(ExecutionStatus, u64)>, StoreError>;

    /// Returns up to `limit` approvals nobody answered yet, oldest request first.
    async fn pending_approvals(&self, limit: i64) -> Result<Vec<PendingApproval>, StoreError>;

    /// Round-trips to the database.
    async fn ping(&self) -> Result<(), StoreError>;

    /// Releases the database: closes the connections and the one-kernel lock, so another
    /// kernel can open it the moment this returns. Later calls fail with `Unavailable` and
    /// never reconnect. [`Kernel::shutdown`](crate::kernel::Kernel::shutdown) calls it once
    /// the actor tree has stopped. The default (a store without connections) does nothing.
    async fn close(&self) {}

    /// Returns one page of the kernel-wide feed (`crate::feed`): events after
    /// `query.after_position` that pass its filters, in position order, at most `query.limit`
    /// of them and (when `query.max_bytes` is set) bounded by bytes as [`Batch`] says.
    async fn feed(&self, query: &FeedQuery) -> Result<Batch<FeedEvent>, StoreError> {
        let _ = query;
        Err(StoreError::Unavailable(
            "this store has no kernel-wide feed".to_owned(),
        ))
    }

    /// How often a feed reader must read again without a commit notice: `Some` when other
    /// processes (other cluster kernels) write events this kernel publishes no notice of, or
    /// when events become readable later than their commit (the cluster feed's horizon).
    fn feed_poll_interval(&self) -> Option<std::time::Duration> {
        None
    }

    /// Changes when events may have been committed by another process (cluster mode with
    /// notifications); a feed reader then reads before its poll interval is up.
    fn feed_wakeups(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        None
    }

    /// Returns the position of the newest stored event (0 when the log is empty).
    async fn head_position(&self) -> Result<i64, StoreError> {
        Err(StoreError::Unavailable(
            "this store has no kernel-wide feed".to_owned(),
        ))
    }

    /// Returns the acknowledged position of every webhook subscription that has one.
    async fn webhook_positions(&self) -> Result<Vec<(String, i64)>, StoreError> {
        Err(StoreError::Unavailable(
            "this store keeps no webhook positions".to_owned(),
        ))
    }

    /// Records that webhook subscription `id` has delivered everything up to `position`.
    async fn set_webhook_position(&self, id: &str, position: i64) -> Result<(), StoreError> {
        let _ = (id, position);
        Err(StoreError::Unavailable(
            "this store keeps no webhook positions".to_owned(),
        ))
    }

    /// Returns every API key, revoked ones included. Stores without keys (test doubles)
    /// have none.
    async fn api_keys(&self) -> Result<Vec<StoredKey>, StoreError> {
        Ok(Vec::new())
    }

    /// Inserts or replaces `keys` (by `public_id`) in one transaction. Fails with `Conflict`
    /// when a name is taken by another key.
    async fn put_api_keys(&self, keys: &[StoredKey]) -> Result<(), StoreError> {
        let _ = keys;
        Err(StoreError::Unavailable(
            "this store keeps no API keys".to_owned(),
        ))
    }

    /// Returns the queue depths `/metrics` reports (read at scrape time). Stores without them
    /// (test doubles) report empty queues.
    async fn queue_depths(&self) -> Result<QueueDepths, StoreError> {
        Ok(QueueDepths::default())
    }
}
