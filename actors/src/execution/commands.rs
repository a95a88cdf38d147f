//! Inputs and outputs of the execution state machine: the commands it decides on, the settings
//! it needs, and the effects the actor performs after a commit.

use std::time::Duration;

use serde_json::Value;

use crate::ids::{ConsumerId, ExecutionId, JobId, StepId, ToolId};
use crate::push::Push;
use crate::time::Timestamp;

/// Kernel-wide settings an execution needs to decide.
#[derive(Clone, Debug, PartialEq)]
pub struct ExecutionSettings {
    /// Default step deadline.
    pub step_timeout: Duration,
    /// Maximum lifetime of an execution, from creation.
    pub execution_timeout: Duration,
    /// Attempts of a remote step unless a policy rule says otherwise.
    pub remote_max_attempts: i64,
    /// Delay before the second attempt of a retried step.
    pub retry_base_delay: Duration,
    /// Cap of any retry delay.
    pub retry_max_delay: Duration,
    /// Whether retry delays are jittered (equal jitter: uniformly within the upper half of
    /// the backoff). Off, every delay is the full backoff (deterministic tests).
    pub retry_jitter: bool,
    /// A `running` execution with no intent for this long is reported as stalled (zero: off).
    pub stall_after: Duration,
    /// A dispatched remote job not started for this long is reported as stalled (zero: off).
    pub job_start_timeout: Duration,
}

impl Default for ExecutionSettings {
    fn default() -> Self {
        Self {
            step_timeout: Duration::from_secs(300),
            execution_timeout: Duration::from_secs(3600),
            remote_max_attempts: 3,
            retry_base_delay: Duration::from_secs(1),
            retry_max_delay: Duration::from_secs(30),
            retry_jitter: true,
            stall_after: Duration::from_secs(300),
            job_start_timeout: Duration::from_secs(60),
        }
    }
}

/// An agent's proposal (WIRE.md §9.1), already checked for required fields and lengths.
#[derive(Clone, Debug, PartialEq)]
pub enum Intent {
    /// Run a tool.
    InvokeTool {
        /// Tool id (non-empty).
        tool_id: ToolId,
        /// Arguments (any JSON, null when absent).
        arguments: Value,
        /// De-duplication key.
        idempotency_key: Option<String>,
        /// Whether a runner executes it.
        remote: bool,
    },
    /// Finish with an output.
    Complete {
        /// Output (absent → null).
        output: Option<Value>,
    },
    /// Finish with an error.
    Fail {
        /// Error (absent or empty → a default text).
        error: Option<String>,
    },
    /// Wait for a signal.
    Wait {
        /// Signal type (non-empty).
        signal_type: String,
    },
    /// An intent type the kernel does not know.
    Unknown {
        /// The type given.
        intent_type: String,
    },
    /// A known type missing its required field (`invoke_tool` without `tool_id`, `wait` without
    /// `signal_type`). Refused with 400, but only after the state checks (WIRE.md §9.2 step 6).
    Invalid {
        /// The type given.
        intent_type: String,
        /// What is missing, e.g. `tool_id is required for invoke_tool`.
        message: String,
    },
}

impl Intent {
    /// Returns the wire name of the intent type.
    pub fn type_name(&self) -> &str {
        match self {
            Self::InvokeTool { .. } => "invoke_tool",
            Self::Complete { .. } => "complete",
            Self::Fail { .. } => "fail",
            Self::Wait { .. } => "wait",
            Self::Unknown { intent_type } | Self::Invalid { intent_type, .. } => intent_type,
        }
    }
}

/// The answer to an intent (WIRE.md §9.3).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IntentReply {
    /// Whether the intent was accepted.
    pub accepted: bool,
    /// Step created by `invoke_tool`.
    pub step_id: Option<StepId>,
    /// Whether the step awaits approval.
    pub pending_approval: bool,
    /// Denial text.
    pub error: Option<String>,
    /// The arguments a `pre_tool` hook gave a local tool, for an agent that applies them
    /// (`Keel-Capabilities: modify`); absent when unchanged.
    pub arguments: Option<Value>,
    /// The recorded outcome of a local call an earlier run completed, for an agent that
    /// returns it instead of running the tool (`Keel-Capabilities: replay`):
    /// `{"of_step_id", "status", "result", "error"}`.
    pub replay: Option<Value>,
}

/// What the agent's SDK does beyond the rebuno protocol, from its `Keel-Capabilities` header
/// (a comma-separated list; unknown words are ignored, so an old kernel and a newer SDK get on).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// It runs a local tool with the arguments a `pre_tool` hook gave it, and hands the agent
    /// the result a `post_tool` hook replaced.
    pub modify: bool,
    /// It returns a recorded result of a local tool instead of running it again.
    pub replay: bool,
}

impl Capabilities {
    /// Reads a `Keel-Capabilities` header value (case-insensitive words separated by commas).
    pub fn parse(header: &str) -> Self {
        let mut capabilities = Self::default();
        for word in header.split(',') {
            let word = word.trim();
            if word.eq_ignore_ascii_case("modify") {
                capabilities.modify = true;
            } else if word.eq_ignore_ascii_case("replay") {
                capabilities.replay = true;
            }
        }
        capabilities
    }
}

/// The answer to an agent's step result.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StepResultReply {
    /// The result a `post_tool` hook put in place of the agent's, for an agent that applies it
    /// (`Keel-Capabilities: modify`); absent when unchanged.
    pub result: Option<Value>,
    /// The `post_tool` hook that failed the step, and why: the agent must not use the result it
    /// has (the answer is a 403).
    pub failed_by_hook: Option<(String, String)>,
}

impl IntentReply {
    /// Returns a plain acceptance.
    pub fn accepted() -> Self {
        Self {
            accepted: true,
            ..Self::default()
        }
    }
}

/// A step result reported by an agent (local steps) or a runner (remote steps).
#[derive(Clone, Debug, PartialEq)]
pub struct StepOutcome {
    /// Step id.
    pub step_id: StepId,
    /// Whether the tool succeeded.
    pub success: bool,
    /// Result data.
    pub data: Option<Value>,
    /// Error text on failure.
    pub error: Option<String>,
    /// Whether the failure may be retried (runners only).
    pub retryable: bool,
    /// What the call cost, per unit (Keel addition; counted against cost budgets).
    pub cost: Option<crate::guardrails::budget::Cost>,
}

/// A remote job to be delivered to a capable runner.
#[derive(Clone, Debug, PartialEq)]
pub struct JobSpec {
    /// Job id.
    pub job_id: JobId,
    /// Execution of the step.
    pub execution_id: ExecutionId,
    /// Step id.
    pub step_id: StepId,
    /// Attempt the job is for.
    pub attempt: i64,
    /// Tool to run.
    pub tool_id: ToolId,
    /// Arguments.
    pub arguments: Value,
    /// Step deadline.
    pub deadline: Timestamp,
    /// Earliest delivery time (retries).
    pub not_before: Option<Timestamp>,
    /// W3C trace context the runner may continue (docs/tracing.md): set by the execution when
    /// it lets a runner claim the job, only when traces are exported.
    pub traceparent: Option<String>,
    /// Key of the logical call, the same for every retry, runner failover and re-run of it
    /// (`{execution_id}:{step_id}` of the call's first step): set when a runner claims the job,
    /// for the runner to pass on to an outside API (docs/runners.md).
    pub idempotency_key: Option<String>,
}

/// Something the actor does after the events of a transition are durable.
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// Send a push to the agent consumer holding the session.
    PushToAgent(Push),
    /// Hand a remote job to the dispatcher.
    EnqueueJob(JobSpec),
    /// A remote step ended: free its runner, and tell it to stop if `cancel_reason` is set.
    StepEnded {
        /// Step id.
        step_id: StepId,
        /// Why the runner should stop, if the step did not end by its result.
        cancel_reason: Option<String>,
    },
    /// The execution went back to `pending`: ask the agent group for a consumer.
    BecamePending,
    /// The session ended (terminal or reset): the consumer no longer holds it.
    SessionEnded {
        /// Consumer that held it.
        consumer_id: ConsumerId,
    },
}
