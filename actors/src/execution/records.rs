//! The records an execution's state is made of: its steps, the history sent with an
//! assignment, its session and the answers of idempotent intents.

use std::time::Duration;

use serde_json::Value;

use crate::ids::{ConsumerId, JobId, RunnerId, SessionId, StepId, ToolId};
use crate::status::StepStatus;
use crate::time::Timestamp;

/// Projection of one step.
#[derive(Clone, Debug, PartialEq)]
pub struct StepState {
    /// Step id.
    pub id: StepId,
    /// Tool it runs.
    pub tool_id: ToolId,
    /// Arguments (any JSON).
    pub arguments: Value,
    /// Current status.
    pub status: StepStatus,
    /// Current attempt, from 1.
    pub attempt: i64,
    /// Attempts allowed.
    pub max_attempts: i64,
    /// Whether a runner executes it.
    pub remote: bool,
    /// Deadline in force (None while awaiting approval or a retry).
    pub deadline: Option<Timestamp>,
    /// Current job of a remote step.
    pub job_id: Option<JobId>,
    /// Runner holding the job, when known.
    pub runner_id: Option<RunnerId>,
    /// Earliest dispatch of a retry job.
    pub not_before: Option<Timestamp>,
    /// Whether the step waits for an operator's approval.
    pub awaiting_approval: bool,
    /// Whether the step ever asked for approval (an answered one is not answered again).
    pub approval_requested: bool,
    /// The operator's answer to its approval: `Some(true)` granted, `Some(false)` denied.
    pub approval_answer: Option<bool>,
    /// Terminal outcome: `Some(true)` succeeded, `Some(false)` failed, for idempotent repeats.
    pub outcome: Option<bool>,
    /// Last change.
    pub updated_at: Timestamp,
    /// When the step was created (its `step.created` event).
    pub created_at: Timestamp,
    /// Per-attempt deadline from the policy rule (else the kernel default).
    pub timeout: Option<Duration>,
    /// First retry delay from the policy rule (else the kernel default).
    pub retry_base_delay: Option<Duration>,
    /// Retry delay cap from the policy rule (else the kernel default).
    pub retry_max_delay: Option<Duration>,
    /// Retries the execution may have in total (its budget when the step was created).
    pub max_retries: Option<u64>,
    /// When the current job was last dispatched (queued or handed to a runner), remote only.
    pub dispatched_at: Option<Timestamp>,
    /// Whether the watchdog already reported this dispatch as not started.
    pub stall_reported: bool,
    /// Run (count of `execution.started` so far, from 1) the step was created in.
    pub run: u32,
    /// Step of an earlier run whose outcome this step replayed.
    pub replay_of: Option<StepId>,
    /// Step of an earlier run whose idempotency key this step keeps.
    pub key_of: Option<StepId>,
    /// The agent's arguments when a `pre_tool` hook replaced them (`arguments` ran).
    pub proposed_arguments: Option<Value>,
    /// Whether a lost runner makes its outcome unknown instead of retrying it.
    pub at_most_once: bool,
    /// Whether its outcome is unknown, waiting for an operator's reconciliation.
    pub outcome_unknown: bool,
    /// `step.progress` events recorded for it.
    pub progress_events: u32,
}

impl StepState {
    /// Returns the arguments that identify the call in the journal: the agent's own.
    pub fn call_arguments(&self) -> &Value {
        self.proposed_arguments.as_ref().unwrap_or(&self.arguments)
    }

    /// Whether the log says a runner got the step's current job: it started it, or the job was
    /// claimed by a named runner (`step.dispatched` with a runner id, recorded at delivery for
    /// retries and for every attempt of an `at_most_once` step).
    pub fn delivered(&self) -> bool {
        self.status == StepStatus::Running || self.runner_id.is_some()
    }

    /// Returns the idempotency key of the logical call this step makes: the same for every
    /// retry, runner failover and re-run of the call (docs/runners.md).
    pub fn idempotency_key(&self, execution_id: &crate::ids::ExecutionId) -> String {
        format!(
            "{execution_id}:{}",
            self.key_of.as_ref().unwrap_or(&self.id)
        )
    }
}

/// One entry of the `history` sent with `execution.assigned` (WIRE.md §10.4.1).
#[derive(Clone, Debug, PartialEq)]
pub struct HistoryEntry {
    /// Step id.
    pub step_id: StepId,
    /// Tool of the step.
    pub tool_id: ToolId,
    /// Terminal status.
    pub status: StepStatus,
    /// Arguments of the step.
    pub arguments: Value,
    /// Result on success.
    pub result: Option<Value>,
    /// Error otherwise.
    pub error: Option<String>,
    /// When the step ended.
    pub completed_at: Timestamp,
}

/// The session of the current run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Session {
    /// Session id.
    pub id: SessionId,
    /// Consumer holding it.
    pub consumer_id: ConsumerId,
}

/// What an idempotent `invoke_tool` answered the first time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordedIntent {
    /// A step was created.
    Accepted {
        /// Step created for it.
        step_id: StepId,
        /// Tool it asked for.
        tool_id: ToolId,
        /// Whether it was remote.
        remote: bool,
        /// Whether the step awaited approval.
        pending_approval: bool,
    },
    /// The call was denied.
    Denied {
        /// Tool it asked for.
        tool_id: ToolId,
        /// Full error text sent back.
        error: String,
    },
}

/// A signal a `wait` consumed, with the run it was consumed in (the journal replays it to the
/// matching `wait` of a re-run).
#[derive(Clone, Debug, PartialEq)]
pub struct ConsumedSignal {
    /// Run that consumed it.
    pub run: u32,
    /// Signal type.
    pub signal_type: String,
    /// Payload.
    pub payload: Value,
}
