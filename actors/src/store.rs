//! The storage port. Actors depend on this trait only; `src/store/` implements it for SQLite and
//! PostgreSQL. The event log is the source of truth; the `executions` and `steps` rows are
//! projections written in the same transaction as the events that change them.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use crate::error::StoreError;
use crate::events::Event;
use crate::feed::{FeedEvent, FeedQuery};
use crate::ids::{AgentId, ConsumerId, ExecutionId, JobId, RunnerId, SessionId, StepId, ToolId};
use crate::status::{ExecutionStatus, StepStatus};
use crate::time::Timestamp;

mod batch;
pub use batch::Batch;

/// Projection row of one execution.
#[derive(Clone, Debug, PartialEq)]
pub struct ExecutionRow {
    /// Execution id.
    pub id: ExecutionId,
    /// Agent that runs it.
    pub agent_id: AgentId,
    /// Current status.
    pub status: ExecutionStatus,
    /// Labels as given at creation (`None` when none were given). Shared, not copied, with the
    /// execution's state: a commit carries its row, and the labels never change.
    pub labels: Option<Arc<BTreeMap<String, String>>>,
    /// Input as given (JSON null when absent); shared like the labels.
    pub input: Arc<Value>,
    /// Output of `complete`, once completed.
    pub output: Option<Value>,
    /// Time of `execution.created`.
    pub created_at: Timestamp,
    /// Time of the last state-changing event.
    pub updated_at: Timestamp,
    /// Session of the current run, if any.
    pub session_id: Option<SessionId>,
    /// Consumer holding the current session, if any.
    pub consumer_id: Option<ConsumerId>,
    /// Sequence of the last event.
    pub last_sequence: i64,
}

/// Projection row of one step.
#[derive(Clone, Debug, PartialEq)]
pub struct StepRow {
    /// Step id.
    pub id: StepId,
    /// Execution it belongs to.
    pub execution_id: ExecutionId,
    /// Tool it runs.
    pub tool_id: ToolId,
    /// Current status.
    pub status: StepStatus,
    /// Current attempt, from 1.
    pub attempt: i64,
    /// Attempts allowed.
    pub max_attempts: i64,
    /// Whether a runner executes it.
    pub remote: bool,
    /// Current job, for remote steps.
    pub job_id: Option<JobId>,
    /// Runner holding the job, when known.
    pub runner_id: Option<RunnerId>,
    /// Current deadline, if enforced.
    pub deadline: Option<Timestamp>,
    /// Time of the last change.
    pub updated_at: Timestamp,
}

/// Everything one execution changes in one atomic step: its new events and the projection rows
/// they produce.
#[derive(Clone, Debug, PartialEq)]
pub struct Commit {
    /// Execution projection after the events.
    pub execution: ExecutionRow,
    /// New events, with contiguous sequences following the stored ones.
    pub events: Vec<Event>,
    /// Steps whose projection changed.
    pub steps: Vec<StepRow>,
    /// The execution's status before these events, when the caller knows it (`None`: not
    /// known). A store may leave an unchanged status unwritten; it must not trust the hint
    /// further than that (SQLite's update matches it against the stored status).
    pub previous_status: Option<ExecutionStatus>,
}

/// Filter and page of `GET /v0/executions`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ListFilter {
    /// Only this status.
    pub status: Option<ExecutionStatus>,
    /// Only this agent.
    pub agent_id: Option<AgentId>,
    /// Every pair must be among the execution's labels.
    pub labels: Vec<(String, String)>,
    /// Only rows strictly after this `(created_at, id)` key in descending order.
    pub after: Option<(Timestamp, ExecutionId)>,
    /// Maximum number of rows to return.
    pub limit: i64,
}

/// One tool call the policy allowed, as the event log recorded it: a `step.created` that is not
/// followed by `step.approval_required`. The policy actor rebuilds its rate-limit windows from
/// these at startup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllowedToolCall {
    /// Agent of the execution that made the call.
    pub agent_id: AgentId,
    /// Tool that was called.
    pub tool_id: ToolId,
    /// Time of the `step.created` event.
    pub at: Timestamp,
}

/// One step result, as the circuit breakers count it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolResult {
    /// Tool of the step.
    pub tool_id: ToolId,
    /// Whether it succeeded (`step.completed`).
    pub success: bool,
    /// Time of the result event.
    pub at: Timestamp,
}

/// One step result a runner reported and its execution took, as runner circuit breakers count
/// it: the runner is the one that last claimed (or started) the step's job before the result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunnerToolResult {
    /// Runner id that reported it.
    pub runner_id: RunnerId,
    /// Whether it succeeded (`step.completed`).
    pub success: bool,
    /// Time of the result event.
    pub at: Timestamp,
}

/// One pending execution of an agent, as its group queues it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingEntry {
    /// Execution id.
    pub id: ExecutionId,
    /// The `priority` of its `execution.created` event (0 when absent).
    pub priority: i64,
    /// Its labels (`None` when it has none), for the limits per label value.
    pub labels: Option<BTreeMap<String, String>>,
}

/// One execution of an agent that holds a running slot, as its group counts it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunningEntry {
    /// Execution id.
    pub id: ExecutionId,
    /// Its labels (`None` when it has none), for the limits per label value.
    pub labels: Option<BTreeMap<String, String>>,
}

/// One non-terminal execution as startup recovery sees it: enough to decide whether it needs
/// its actor now or can stay in the store until something concerns it.
#[derive(Clone, Debug, PartialEq)]
pub struct RecoveryEntry {
    /// Execution id.
    pub id: ExecutionId,
    /// Agent that runs it.
    pub agent_id: AgentId,
    /// Current status.
    pub status: ExecutionStatus,
    /// Time of `execution.created` (its deadline counts from here).
    pub created_at: Timestamp,
    /// Session of the current run, if any.
    pub session_id: Option<SessionId>,
    /// Consumer holding that session, if any.
    pub consumer_id: Option<ConsumerId>,
    /// Whether any of its steps is not terminal.
    pub live_steps: bool,
}

/// One tool call waiting for a human decision: a `step.approval_required` of a `blocked`
/// execution with no later event of that step (`GET /v0/approvals`, the console's inbox).
#[derive(Clone, Debug, PartialEq)]
pub struct PendingApproval {
    /// Execution that waits.
    pub execution_id: ExecutionId,
    /// Its agent.
    pub agent_id: AgentId,
    /// The gated step (the `step_id` a `step.approve` signal names).
    pub step_id: StepId,
    /// Payload of the `step.approval_required` event (`tool_id`, `arguments`, `remote`,
    /// `reason`).
    pub request: Value,
    /// Time of the `step.approval_required` event.
    pub requested_at: Timestamp,
    /// Payload of the step's latest `approval.requested` event (the first is written beside
    /// the request; an escalation writes another, with `escalated` and its own approvers and
    /// expiry), when there is one.
    pub latest_request: Option<Value>,
}

/// An API key as the store keeps it: looked up by `public_id`, unique by `name`; `record` is
/// the HTTP adapter's JSON (role, scopes, hash of the secret, times), opaque to the store.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredKey {
    /// Public part of the key (`keel_<public_id>_<secret>`).
    pub public_id: String,
    /// Unique name.
    pub name: String,
    /// Everything else, as JSON.
    pub record: Value,
}

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

/// What waits, as the store knows it: pending executions per agent and queued remote steps per
/// tool.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueueDepths {
    /// `(agent_id, pending executions, creation time of the oldest)`.
    pub pending_by_agent: Vec<(AgentId, u64, Timestamp)>,
    /// `(tool_id, remote steps no runner has started yet)`.
    pub queued_by_tool: Vec<(ToolId, u64)>,
}
