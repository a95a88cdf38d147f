//! The execution projection: the state an `ExecutionActor` holds, folded from events only.
//! `apply` is total (it never fails) and is the one place where an event changes state, so a
//! rehydrated actor and a live one cannot disagree.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::events::{Event, EventBody};
use crate::guardrails::budget::BudgetUsage;
use crate::ids::{AgentId, ExecutionId, StepId};
use crate::status::{ExecutionStatus, StepStatus};
use crate::time::Timestamp;

mod apply;
#[cfg(test)]
mod replay_tests;
mod settle;

pub use super::journal::Journal;
pub use super::records::{ConsumedSignal, HistoryEntry, RecordedIntent, Session, StepState};

/// The folded state of one execution.
#[derive(Clone, Debug, PartialEq)]
pub struct ExecutionState {
    /// Execution id.
    pub id: ExecutionId,
    /// Agent that runs it.
    pub agent_id: AgentId,
    /// Current status.
    pub status: ExecutionStatus,
    /// Labels given at creation, shared with every projection row (`row()`).
    pub labels: Option<Arc<BTreeMap<String, String>>>,
    /// Input, shared with every projection row (`row()`).
    pub input: Arc<Value>,
    /// Queue priority given at creation (0 when none).
    pub priority: i64,
    /// W3C trace context recorded at creation (docs/tracing.md).
    pub traceparent: Option<String>,
    /// Principal that created it (`execution.created`), for policy `when: created_by`.
    pub created_by: Option<String>,
    /// End user it was created for (`execution.created`), for policy `when: on_behalf_of`.
    pub on_behalf_of: Option<String>,
    /// Output once completed.
    pub output: Option<Value>,
    /// Creation time.
    pub created_at: Timestamp,
    /// Last change.
    pub updated_at: Timestamp,
    /// Sequence of the last applied event.
    pub last_sequence: i64,
    /// Session of the current run.
    pub session: Option<Session>,
    /// Steps in creation order.
    pub steps: Vec<StepState>,
    /// Steps the execution ever had.
    pub step_count: u64,
    /// Whether active tool steps block it.
    pub tool_blocked: bool,
    /// Signal type it waits for.
    pub signal_wait: Option<String>,
    /// Step awaiting approval.
    pub approval: Option<StepId>,
    /// When the last approval asked for expires (read with [`Self::approval_expiry`]).
    pub approval_expires_at: Option<Timestamp>,
    /// The last `approval.requested` of each step that asked for approval (in logs written
    /// before it existed, the terms of its `step.approval_required`): who may answer, the
    /// expiry and the escalation — what the approvals API checks an answer against.
    pub approval_requests: BTreeMap<StepId, Arc<crate::events::ApprovalRequest>>,
    /// Budget limit (`max_cost.usd`, `max_tokens`) a model call waits to have raised.
    pub budget_wait: Option<String>,
    /// Signals received and not consumed yet, oldest first.
    pub pending_signals: VecDeque<(String, Value)>,
    /// Idempotency keys of the current run.
    pub intents: HashMap<String, RecordedIntent>,
    /// Terminal step events so far, in log order.
    pub history: Vec<HistoryEntry>,
    /// Whether `agent.timeout` was recorded for the current session.
    pub session_lost: bool,
    /// When the execution last became `running` or recorded an intent (stall watchdog).
    pub idle_since: Timestamp,
    /// `since` of the last `no_intent` stall recorded, so each occurrence is recorded once.
    pub stall_reported_since: Option<Timestamp>,
    /// What the execution used of its budget (steps, calls per tool, retries, cost).
    pub usage: BudgetUsage,
    /// Runs so far (`execution.started` events).
    pub runs: u32,
    /// Recorded outcomes of earlier runs' calls, from the second run on (`None` before, or
    /// when no call of an earlier run completed).
    pub journal: Option<Journal>,
    /// Signals consumed by a `wait`, oldest first (replayed to the matching wait of a re-run).
    pub consumed_signals: Vec<ConsumedSignal>,
}

impl ExecutionState {
    /// Builds the state from a complete event log; `None` if the log does not start with
    /// `execution.created`.
    pub fn from_events(events: &[Event]) -> Option<Self> {
        let first = events.first()?;
        let EventBody::ExecutionCreated {
            agent_id,
            input,
            labels,
            priority,
            traceparent,
            created_by,
            on_behalf_of,
        } = &first.body
        else {
            return None;
        };
        let mut state = Self {
            id: first.execution_id.clone(),
            agent_id: agent_id.clone(),
            status: ExecutionStatus::Pending,
            labels: serde_json::from_value(labels.clone())
                .ok()
                .flatten()
                .map(Arc::new),
            input: Arc::new(input.clone()),
            priority: *priority,
            traceparent: traceparent.clone(),
            created_by: created_by.clone(),
            on_behalf_of: on_behalf_of.clone(),
            output: None,
            created_at: first.timestamp,
            updated_at: first.timestamp,
            last_sequence: first.sequence,
            session: None,
            steps: Vec::new(),
            step_count: 0,
            tool_blocked: false,
            signal_wait: None,
            approval: None,
            approval_expires_at: None,
            approval_requests: BTreeMap::new(),
            budget_wait: None,
            pending_signals: VecDeque::new(),
            intents: HashMap::new(),
            history: Vec::new(),
            session_lost: false,
            idle_since: first.timestamp,
            stall_reported_since: None,
            usage: BudgetUsage::default(),
            runs: 0,
            journal: None,
            consumed_signals: Vec::new(),
        };
        for event in &events[1..] {
            state.apply(event);
        }
        Some(state)
    }

    /// Returns the step with this id.
    pub fn step(&self, id: &StepId) -> Option<&StepState> {
        self.steps.iter().find(|step| step.id == id)
    }

    fn step_mut(&mut self, id: Option<&StepId>) -> Option<&mut StepState> {
        let id = id?;
        self.steps.iter_mut().find(|step| step.id == id)
    }

    /// Returns the steps that have not ended.
    pub fn active_steps(&self) -> impl Iterator<Item = &StepState> {
        self.steps.iter().filter(|step| !step.status.is_terminal())
    }

    /// Returns the last request of the approval of `step_id`.
    pub fn approval_request(&self, step_id: &StepId) -> Option<&crate::events::ApprovalRequest> {
        self.approval_requests.get(step_id).map(Arc::as_ref)
    }

    /// Returns when the approval the execution waits for expires (none without one).
    pub fn approval_expiry(&self) -> Option<Timestamp> {
        self.approval.as_ref().and(self.approval_expires_at)
    }

    /// Returns whether a signal wait or an approval blocks the execution (tool steps do not
    /// count: intents are processed as in `running` while only they block).
    pub fn hard_blocked(&self) -> bool {
        self.signal_wait.is_some() || self.approval.is_some() || self.budget_wait.is_some()
    }

    /// Returns the status implied by the blockers of a non-terminal, assigned execution.
    fn derived_status(&self) -> ExecutionStatus {
        if self.status.is_terminal() || self.status == ExecutionStatus::Pending {
            return self.status;
        }
        if self.tool_blocked || self.hard_blocked() {
            ExecutionStatus::Blocked
        } else {
            ExecutionStatus::Running
        }
    }
}

fn non_empty<T: AsRef<str> + Clone>(value: &T) -> Option<T> {
    if value.as_ref().is_empty() {
        None
    } else {
        Some(value.clone())
    }
}
