//! Messages of the execution actor and its supervisor.

use ractor::{ActorRef, RpcReplyPort};
use serde_json::Value;

use super::commands::{Capabilities, Intent, IntentReply, JobSpec, StepOutcome, StepResultReply};
use crate::ids::{ConsumerId, ExecutionId, JobId, RunnerId, SessionId, StepId};
use crate::kernel::KernelError;
use crate::push::Push;
use crate::store::ExecutionRow;

/// Reply port of a kernel command.
/// Selects executions by id (cluster mode: those of partitions this kernel lost).
pub type ReleaseFilter = std::sync::Arc<dyn Fn(&ExecutionId) -> bool + Send + Sync>;

pub type Reply<T> = RpcReplyPort<Result<T, KernelError>>;

/// What the approvals API checks an answer against, from the execution's state.
#[derive(Clone, Debug, Default)]
pub struct ApprovalFacts {
    /// Principal that created the execution.
    pub created_by: Option<String>,
    /// The approval's last request (`None`: the step never asked for one).
    pub request: Option<std::sync::Arc<crate::events::ApprovalRequest>>,
}

/// Messages of one `ExecutionActor`.
pub enum ExecutionMsg {
    /// Submits an agent intent on a session.
    SubmitIntent {
        /// Session given by the agent.
        session_id: SessionId,
        /// Execution that holds that session, if not this one.
        session_owner: Option<ExecutionId>,
        /// The intent.
        intent: Intent,
        /// What the agent's SDK can do beyond the rebuno protocol.
        capabilities: Capabilities,
        /// Answer.
        reply: Reply<IntentReply>,
    },
    /// Records a step result from the agent holding the session.
    ReportStepResult {
        /// Session given by the agent.
        session_id: SessionId,
        /// Execution that holds that session, if not this one.
        session_owner: Option<ExecutionId>,
        /// The result.
        outcome: StepOutcome,
        /// What the agent's SDK can do beyond the rebuno protocol.
        capabilities: Capabilities,
        /// Answer.
        reply: Reply<StepResultReply>,
    },
    /// Records a result from a runner.
    ReportRunnerResult {
        /// The result.
        outcome: StepOutcome,
        /// Answer.
        reply: Reply<()>,
    },
    /// Records that a runner started a step.
    MarkStepStarted {
        /// Step id.
        step_id: StepId,
        /// Runner id.
        runner_id: RunnerId,
        /// Answer.
        reply: Reply<()>,
    },
    /// Records a runner's progress report of a step it holds (`step.progress`).
    RecordStepProgress {
        /// Step id.
        step_id: StepId,
        /// Runner id.
        runner_id: RunnerId,
        /// The report.
        report: super::machine::Progress,
        /// Answer.
        reply: Reply<()>,
    },
    /// Records a signal.
    DeliverSignal {
        /// Signal type.
        signal_type: String,
        /// Payload.
        payload: Value,
        /// Principal whose request sent it, recorded on `signal.received`.
        sent_by: Option<String>,
        /// Answer.
        reply: Reply<()>,
    },
    /// An operator's answer to a step whose outcome is unknown.
    ReconcileStep {
        /// The step.
        step_id: StepId,
        /// The answer.
        answer: super::machine::Reconciliation,
        /// Principal whose request answered.
        by: Option<String>,
        /// Answer.
        reply: Reply<()>,
    },
    /// Cancels the execution.
    Cancel {
        /// Answer: the projection afterwards.
        reply: Reply<ExecutionRow>,
    },
    /// Offers the execution to a consumer (from its agent group); answers the assignment push.
    OfferToConsumer {
        /// Consumer picked by the group.
        consumer_id: ConsumerId,
        /// Answer.
        reply: Reply<Push>,
    },
    /// Asks whether a queued job may still be delivered to a runner (from a runner actor).
    ClaimJob {
        /// The job.
        job: JobSpec,
        /// Runner that would take it.
        runner_id: RunnerId,
        /// Answer: the job as delivered, or `None` when stale.
        reply: RpcReplyPort<Option<JobSpec>>,
    },
    /// The consumer holding the session is gone for good (grace expired).
    ConsumerLost {
        /// Consumer id.
        consumer_id: ConsumerId,
        /// Reset reason (`agent_disconnect` or `recovery`).
        reason: String,
        /// Answered once handled (the sender re-activates a passivated execution until then).
        ack: Option<RpcReplyPort<()>>,
    },
    /// A runner holding a job of this execution went away and did not come back in time.
    RunnerLost {
        /// Step of the job.
        step_id: StepId,
        /// The job.
        job_id: JobId,
    },
    /// The actor's wake-up fired, or the supervisor woke a passivated execution whose
    /// deadline passed: enforces the execution deadline or a step deadline and records the
    /// stalls that are due, whichever applies (none when it came early).
    Wake,
    /// Checks whether the execution is still idle since `epoch` (sent to itself after
    /// `passivate_after`); if so it offers its supervisor to stop.
    IdleCheck {
        /// Activity count when the check was armed.
        epoch: u64,
    },
    /// Stop now unless something happened since `epoch` (from the supervisor, which already
    /// routes new activations to a successor).
    Passivate {
        /// Activity count of the accepted offer.
        epoch: u64,
    },
    /// May a model call go to the provider now (LLM gateway)? Answers whether the execution
    /// still runs and is within its cost budget.
    AdmitLlmCall {
        /// `provider/model` of the call (checked against the policy's `models.allow`).
        model_id: String,
        /// Whether a call over a `require_approval` budget may block the execution on a raise
        /// (false: a waiting call checking again).
        ask_approval: bool,
        /// What the call is estimated to spend (reserved while it is in flight).
        estimate: crate::guardrails::reservations::LlmEstimate,
        /// Answer.
        reply: RpcReplyPort<LlmAdmission>,
    },
    /// Ends the execution's budget wait that no operator answered within a model call's wait
    /// (`execution.resumed` `budget approval timed out`).
    EndBudgetWait {
        /// Answer.
        reply: Reply<()>,
    },
    /// Records a model call made through the LLM gateway (`llm.called`) and releases its
    /// reservation.
    RecordLlmCall {
        /// The call (`None`: it never reached the provider and is not recorded).
        call: Option<Box<crate::events::LlmCall>>,
        /// The reservation [`LlmAdmission::Allowed`] gave it.
        reservation: Option<u64>,
        /// Answer.
        reply: Reply<()>,
    },
    /// Returns what an answer to the approval of `step_id` is checked against.
    GetApproval {
        /// The approval's step.
        step_id: StepId,
        /// Answer.
        reply: Reply<ApprovalFacts>,
    },
    /// Returns the projection.
    GetExecution {
        /// Answer.
        reply: RpcReplyPort<ExecutionRow>,
    },
    /// Makes the actor fail (tests of supervision only).
    #[cfg(any(test, feature = "testing"))]
    Crash,
    /// `message`, sent on behalf of `principal`: the events it causes record that name
    /// (`crate::principal`). Unwrapped before anything else looks at the message.
    ActingAs {
        /// Key name (`admin`, `anonymous`).
        principal: std::sync::Arc<str>,
        /// The message.
        message: Box<ExecutionMsg>,
    },
}

/// Whether a model call may be forwarded ([`ExecutionMsg::AdmitLlmCall`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LlmAdmission {
    /// Forward it; `runs` is the execution's number of runs so far (a re-run's calls may be
    /// answered from the journal).
    Allowed {
        /// `execution.started` events so far.
        runs: u32,
        /// The call's reservation, released by [`ExecutionMsg::RecordLlmCall`] (`None`: the
        /// execution has no budget).
        reservation: Option<u64>,
        /// The execution's W3C trace context, when traces are exported (the call's span is
        /// its child).
        traceparent: Option<String>,
    },
    /// Calls in flight may together spend what is left of the budget: wait for them to be
    /// recorded and ask again.
    InFlight {
        /// Calls in flight.
        calls: usize,
    },
    /// The execution has finished.
    Finished,
    /// A `max_cost` unit or `max_tokens` of the execution's budget is spent; the reason names
    /// it.
    OverBudget(String),
    /// The budget is spent and the execution waits for an operator's `budget.approve`; the
    /// call may wait up to `wait` for the raise.
    AwaitingApproval {
        /// Names the spent limit.
        reason: String,
        /// The budget's `approval_wait`.
        wait: std::time::Duration,
    },
    /// The policy's `models.allow` does not list the model; the reason names the list.
    ModelNotAllowed(String),
}

/// Messages of the execution supervisor.
pub enum ExecutionSupervisorMsg {
    /// Spawns the actor of a new execution whose creation is already durable.
    Create {
        /// Its state after `execution.created`.
        state: Box<super::state::ExecutionState>,
        /// Answer: the live actor.
        reply: Reply<ActorRef<ExecutionMsg>>,
    },
    /// Returns the live actor of an execution, rebuilding it from the store if needed.
    Activate {
        /// Execution id.
        id: ExecutionId,
        /// Whether a rebuilt actor re-announces itself to its neighbours (startup recovery, a
        /// creation settled after an outage); a passivated execution is already known to them.
        announce: bool,
        /// Answer: the live actor (`ExecutionNotFound` when it has no events).
        reply: Reply<ActorRef<ExecutionMsg>>,
    },
    /// An idle execution actor offers to stop (sent by the actor itself).
    Idle {
        /// Execution id.
        id: ExecutionId,
        /// The actor making the offer.
        actor: ractor::ActorId,
        /// Its activity count when it became idle.
        epoch: u64,
        /// When the execution must be woken up again, if ever.
        wake_at: Option<crate::time::Timestamp>,
    },
    /// An actor asked to stop had new work in the meantime and stays.
    StillBusy {
        /// Execution id.
        id: ExecutionId,
        /// The actor.
        actor: ractor::ActorId,
    },
    /// Executions found waiting at startup: they stay in the store until something concerns
    /// them or their deadline comes.
    Dormant(Vec<(ExecutionId, Option<crate::time::Timestamp>)>),
    /// The earliest wake-up time came (sent by the supervisor to itself).
    WakeDue,
    /// Cluster mode: stops the actors (live or draining) of the executions `matches` selects
    /// and forgets their wake-ups; another kernel owns them now.
    Release {
        /// Selects the executions to let go.
        matches: ReleaseFilter,
        /// Answer: how many actors were stopped.
        reply: Reply<usize>,
    },
}
