//! What the storage port reads and writes besides events: projection rows of executions and
//! steps, a commit, list filters, and the entries recovery, the queues, the guardrails and
//! authentication read back. The trait itself is in `store.rs`.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use crate::events::Event;
use crate::ids::{AgentId, ConsumerId, ExecutionId, JobId, RunnerId, SessionId, StepId, ToolId};
use crate::status::{ExecutionStatus, StepStatus};
use crate::time::Timestamp;

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

/// What waits, as the store knows it: pending executions per agent and queued remote steps per
/// tool.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueueDepths {
    /// `(agent_id, pending executions, creation time of the oldest)`.
    pub pending_by_agent: Vec<(AgentId, u64, Timestamp)>,
    /// `(tool_id, remote steps no runner has started yet)`.
    pub queued_by_tool: Vec<(ToolId, u64)>,
}
