//! [`EventBody`]: one typed variant per event type of WIRE.md §15, with its payload fields.
//! Field names are part of the wire contract (see the module doc of `events.rs` for Keel's
//! additions).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{ApprovalRequest, ApprovalResolution, BlockReason, LlmCall, ResumeReason};
use crate::ids::{AgentId, ConsumerId, JobId, RunnerId, SessionId, StepId, ToolId};
use crate::time::{self, Timestamp};

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's `skip_serializing_if` passes a reference
fn is_zero(value: &i64) -> bool {
    *value == 0
}

/// The type-specific part of an event: its `type` and `payload`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "payload")]
pub enum EventBody {
    /// An execution was created by a client.
    #[serde(rename = "execution.created")]
    ExecutionCreated {
        /// Agent that will run it.
        agent_id: AgentId,
        /// Input as given (any JSON).
        input: Value,
        /// Labels as given, or null.
        labels: Value,
        /// Queue priority within the agent's pending executions (higher first). Keel's
        /// addition, written only when not 0.
        #[serde(default, skip_serializing_if = "is_zero")]
        priority: i64,
        /// W3C trace context of the creating request, recorded only when traces are exported
        /// (docs/tracing.md): later spans of the execution, and its pushes, continue it.
        /// Keel's addition.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        traceparent: Option<String>,
        /// Principal (API key name, `admin` for the bearer token) whose request created it;
        /// absent on kernels without authentication. Keel's addition.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        created_by: Option<String>,
        /// End user the creation was made for, as the creator said. Keel's addition.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        on_behalf_of: Option<String>,
    },
    /// The execution was assigned to an agent consumer and a session was opened.
    #[serde(rename = "execution.started")]
    ExecutionStarted {
        /// Session the consumer will use.
        session_id: SessionId,
        /// Consumer that received the assignment.
        consumer_id: ConsumerId,
    },
    /// A blocker appeared (tool steps, a signal wait or an approval).
    #[serde(rename = "execution.blocked")]
    ExecutionBlocked {
        /// `tool`, `signal` or `approval`.
        reason: BlockReason,
        /// First step id (tool, approval) or the awaited signal type.
        #[serde(rename = "ref")]
        reference: String,
        /// Tool of the approval step.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool_id: Option<ToolId>,
        /// Arguments of the approval step.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        arguments: Option<Value>,
        /// Whether the approval step is remote.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        remote: Option<bool>,
    },
    /// A blocker cleared.
    #[serde(rename = "execution.resumed")]
    ExecutionResumed {
        /// Why: `step completed`, `signal received: <type>`, `approval granted`, ...
        reason: ResumeReason,
    },
    /// The agent completed the execution.
    #[serde(rename = "execution.completed")]
    ExecutionCompleted {
        /// Output of the `complete` intent (null when absent).
        output: Value,
    },
    /// The execution failed (agent `fail`, step timeout, execution timeout, supervision).
    #[serde(rename = "execution.failed")]
    ExecutionFailed {
        /// What went wrong.
        error: String,
    },
    /// The execution was cancelled.
    #[serde(rename = "execution.cancelled")]
    ExecutionCancelled {
        /// Why it was cancelled.
        reason: String,
    },
    /// The execution went back to `pending` (agent lost, recovery, failed push).
    #[serde(rename = "execution.reset")]
    ExecutionReset {
        /// `agent_disconnect`, `recovery` or `send_failed`.
        reason: String,
        /// Status it had before the reset.
        from_status: String,
    },
    /// An intent was accepted.
    #[serde(rename = "intent.accepted")]
    IntentAccepted {
        /// `invoke_tool`, `complete`, `fail` or `wait`.
        intent_type: String,
        /// Type-specific details.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        details: Option<Value>,
    },
    /// An `invoke_tool` intent was denied by policy or a rate limit.
    #[serde(rename = "intent.denied")]
    IntentDenied {
        /// Always `invoke_tool` today.
        intent_type: String,
        /// Tool that was asked for.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool_id: Option<ToolId>,
        /// Arguments that were given.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        arguments: Option<Value>,
        /// Key of the intent, for de-duplication.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        idempotency_key: Option<String>,
        /// Reason given by the policy.
        reason: String,
        /// Rule that decided.
        rule_id: String,
    },
    /// A tool step was created.
    #[serde(rename = "step.created")]
    StepCreated {
        /// Tool to run.
        tool_id: ToolId,
        /// Always 0.
        tool_version: i64,
        /// Arguments (any JSON).
        arguments: Value,
        /// Attempts allowed in total.
        max_attempts: i64,
        /// Current attempt, from 1.
        attempt: i64,
        /// When the step times out.
        #[serde(with = "time::serde_micros")]
        deadline: Timestamp,
        /// Whether a runner executes it (Keel addition).
        #[serde(default)]
        remote: bool,
        /// Per-attempt deadline set by the matching policy rule, in ms (Keel addition).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_ms: Option<u64>,
        /// Delay before the second attempt set by the matching policy rule, in ms (Keel addition).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_base_delay_ms: Option<u64>,
        /// Cap of the retry delays set by the matching policy rule, in ms (Keel addition).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_max_delay_ms: Option<u64>,
        /// Retries the execution may have in total, from the budget in force when the step
        /// was created (Keel addition, docs/guardrails.md).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_retries: Option<u64>,
        /// Step of an earlier run whose recorded outcome this step replays instead of running
        /// the tool again (Keel addition, docs/failure-semantics.md).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        replay_of: Option<StepId>,
        /// Step of an earlier run at the same journal position whose idempotency key this
        /// call keeps (absent: the key is this step's own). Keel addition.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key_of: Option<StepId>,
        /// Step of an earlier run whose outcome was recorded but that this call runs again (a
        /// local tool of the rebuno SDK, or a rule with `replay: false`). Keel addition.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        repeats: Option<StepId>,
        /// The arguments the agent proposed when a `pre_tool` hook replaced them (`arguments`
        /// are the ones the tool runs with): the call's identity in the journal, so that a
        /// re-run's identical intent matches it. Keel addition.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        proposed_arguments: Option<Value>,
        /// The matching rule says `idempotency: at_most_once`: a lost runner makes the
        /// outcome unknown instead of retrying the step. Keel addition.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        at_most_once: bool,
    },
    /// A step was handed out (to a runner, or to the agent after approval).
    #[serde(rename = "step.dispatched")]
    StepDispatched {
        /// Runner that holds it, or `""`.
        runner_id: RunnerId,
        /// Job id, or `""` for local steps.
        job_id: JobId,
        /// When the step times out.
        #[serde(with = "time::serde_micros")]
        deadline: Timestamp,
    },
    /// A runner reported that it started the step.
    #[serde(rename = "step.started")]
    StepStarted {
        /// Runner that started it.
        runner_id: RunnerId,
    },
    /// The step succeeded.
    #[serde(rename = "step.completed")]
    StepCompleted {
        /// Tool result (any JSON).
        result: Value,
        /// What the call cost, per unit, as the result reported it (Keel addition).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost: Option<crate::guardrails::budget::Cost>,
    },
    /// The step failed.
    #[serde(rename = "step.failed")]
    StepFailed {
        /// Error text.
        error: String,
        /// Whether another attempt follows.
        retryable: bool,
        /// What the failed attempt cost, per unit, as the result reported it (Keel addition).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost: Option<crate::guardrails::budget::Cost>,
    },
    /// A runner relayed the tool's progress (an MCP `notifications/progress`); informational,
    /// at most [`MAX_PROGRESS_EVENTS`] per step. Keel addition (docs/mcp.md, "Progress").
    #[serde(rename = "step.progress")]
    StepProgress {
        /// Progress so far (grows with every notification).
        progress: f64,
        /// Total, when the tool knows it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        total: Option<f64>,
        /// What the tool said, at most [`MAX_PROGRESS_MESSAGE_BYTES`].
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// The step passed its deadline.
    #[serde(rename = "step.timed_out")]
    StepTimedOut {},
    /// The step will be attempted again.
    #[serde(rename = "step.retried")]
    StepRetried {
        /// Attempt number of the retry.
        next_attempt: i64,
        /// Earliest dispatch time of the retry job (Keel addition).
        #[serde(
            default,
            with = "time::serde_micros_opt",
            skip_serializing_if = "Option::is_none"
        )]
        not_before: Option<Timestamp>,
    },
    /// An `at_most_once` step lost its runner after delivery and before a result: it may or
    /// may not have happened, so it is not retried; an operator reconciles it. Keel addition.
    #[serde(rename = "step.outcome_unknown")]
    StepOutcomeUnknown {
        /// Runner that held the job.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        runner_id: Option<RunnerId>,
        /// Why the outcome is unknown.
        reason: String,
    },
    /// An operator answered a step whose outcome was unknown: `happened` (with its result),
    /// `run_again` or `fail`. The step's usual events follow. Keel addition.
    #[serde(rename = "step.reconciled")]
    StepReconciled {
        /// `happened`, `run_again` or `fail`.
        answer: String,
        /// Principal whose request answered (absent on kernels without authentication).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<String>,
    },
    /// The step was cancelled.
    #[serde(rename = "step.cancelled")]
    StepCancelled {
        /// Why.
        reason: String,
    },
    /// The step waits for a human approval.
    #[serde(rename = "step.approval_required")]
    StepApprovalRequired {
        /// Tool to run once approved.
        tool_id: ToolId,
        /// Arguments.
        arguments: Value,
        /// Whether a runner executes it.
        remote: bool,
        /// Reason given by the policy.
        reason: String,
        /// Rule that asked for the approval (Keel addition; absent in older logs).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rule_id: Option<String>,
        /// `sha256:<hex>` of the arguments' canonical JSON: the approval is for exactly
        /// these arguments (Keel addition; absent in older logs).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        arguments_digest: Option<String>,
        /// Who may answer (the rule's `approval.approvers`; absent: any key that answers
        /// approvals). Keel addition.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        approvers: Option<crate::approvals::Approvers>,
        /// When the approval expires (the rule's `approval.expires_in`). Keel addition.
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            with = "time::serde_micros_opt"
        )]
        expires_at: Option<Timestamp>,
        /// What expiry does: `deny`. Keel addition.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        on_expiry: Option<String>,
        /// Whether the execution's creator may answer (the rule's `approval.self_approval`).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        self_approval: bool,
    },
    /// A signal arrived.
    #[serde(rename = "signal.received")]
    SignalReceived {
        /// Signal type.
        signal_type: String,
        /// Payload (any JSON).
        payload: Value,
        /// Principal whose request sent it (key name, `admin` for the bearer token); absent
        /// on kernels without authentication. Keel's addition.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sent_by: Option<String>,
    },
    /// The agent holding the execution went away.
    #[serde(rename = "agent.timeout")]
    AgentTimeout {
        /// Session that was lost (`""` from recovery).
        session_id: SessionId,
    },
    /// The stall watchdog saw no progress (informational; changes no state but the watchdog's
    /// own "already reported" mark). Keel addition.
    #[serde(rename = "execution.stalled")]
    ExecutionStalled {
        /// `no_intent` (running, no intent since `since`) or `job_not_started` (a remote job
        /// dispatched at `since` and not started).
        reason: String,
        /// Step of the job (`job_not_started`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        step_id: Option<StepId>,
        /// Runner holding the job, when one took it (`job_not_started`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        runner_id: Option<RunnerId>,
        /// Since when nothing happened.
        #[serde(with = "time::serde_micros")]
        since: Timestamp,
    },
    /// A hook of the hook chain decided (docs/hooks.md). Keel addition.
    #[serde(rename = "hook.decided")]
    HookDecided {
        /// Hook id from the policy.
        hook_id: String,
        /// `pre_tool`, `post_tool` or `pre_create`.
        point: String,
        /// `pass`, `modify`, `abort`, or `error` (the call failed; `failure_mode` says what
        /// followed).
        decision: String,
        /// Time the call took, in milliseconds.
        latency_ms: u64,
        /// Tool of the call.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool_id: Option<ToolId>,
        /// Reason given by the hook (abort), or why the call failed (error).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// `fail_closed` or `fail_open`, for an `error`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        failure_mode: Option<String>,
        /// Labels a `pre_create` hook added (`modify`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        labels: Option<std::collections::BTreeMap<String, String>>,
    },
    /// A result of this execution opened the circuit breaker of a tool: intents for it are
    /// denied until `until` (informational; Keel addition, docs/guardrails.md).
    #[serde(rename = "tool.circuit_opened")]
    ToolCircuitOpened {
        /// Tool id of the breaker.
        tool_id: ToolId,
        /// Failures within the window that opened it (1 for a failed probe).
        failures: u32,
        /// Whether a failed probe opened it again.
        #[serde(default)]
        probe: bool,
        /// When the next probe may pass.
        #[serde(with = "time::serde_micros")]
        until: Timestamp,
    },
    /// A probe of this execution succeeded: the tool's circuit breaker closed (informational;
    /// Keel addition).
    #[serde(rename = "tool.circuit_closed")]
    ToolCircuitClosed {
        /// Tool id of the breaker.
        tool_id: ToolId,
    },
    /// A model call made through the LLM gateway on behalf of this execution (docs/llm.md).
    /// Keel addition; its `cost` counts against the execution's `max_cost` like a tool's.
    #[serde(rename = "llm.called")]
    LlmCalled(Box<LlmCall>),
    /// An operator raised the execution's budget (a granted `budget.approve` signal): these
    /// limits replace the policy's for this execution from now on (docs/llm.md). Keel addition.
    #[serde(rename = "budget.raised")]
    BudgetRaised {
        /// New cost limits per unit.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        max_cost: BTreeMap<String, f64>,
        /// New limit of model tokens.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_tokens: Option<u64>,
    },
    /// An approval waits (Keel addition; docs/events.md, docs/security.md).
    #[serde(rename = "approval.requested")]
    ApprovalRequested(Box<ApprovalRequest>),
    /// An approval was answered or expired (Keel addition).
    #[serde(rename = "approval.resolved")]
    ApprovalResolved(Box<ApprovalResolution>),
}
