//! The execution state machine: pure functions from (state, command) to the events to record,
//! the effects to perform once they are durable, and the reply. Nothing here does I/O; the
//! actor commits the events, applies them with [`ExecutionState::apply`] and runs the effects.

use std::time::Duration;

use serde_json::{Value, json};

use super::commands::{Effect, ExecutionSettings, Intent, IntentReply, JobSpec, StepOutcome};
use super::rejection::Rejection;
use super::state::{ExecutionState, RecordedIntent, StepState};
use crate::events::{EventBody, NewEvent};
use crate::ids::{ExecutionId, JobId, SessionId, StepId};
use crate::policy::{Decision, PolicyDecision};
use crate::push::Push;
use crate::status::{ExecutionStatus, StepStatus};
use crate::time::Timestamp;

/// Longest `error` kept from a `fail` intent, in bytes (WIRE.md corrections, item 8).
pub const MAX_FAIL_ERROR_BYTES: usize = 4096;
/// Most `history` entries sent with an assignment.
pub const HISTORY_MAX_ENTRIES: usize = 50;
/// Largest JSON size of the `history` sent with an assignment.
pub const HISTORY_MAX_BYTES: usize = 512 * 1024;

/// Events to record and effects to run for one accepted command.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Transition {
    /// Events, in order; recorded atomically.
    pub events: Vec<NewEvent>,
    /// Effects, run after the events are durable, in order.
    pub effects: Vec<Effect>,
}

impl Transition {
    fn event(&mut self, event: NewEvent) {
        self.events.push(event);
    }

    fn effect(&mut self, effect: Effect) {
        self.effects.push(effect);
    }
}

/// Returns the first event of a new execution.
pub fn create(agent_id: &str, input: Value, labels: Value) -> NewEvent {
    NewEvent::execution(EventBody::ExecutionCreated { agent_id: agent_id.to_owned(), input, labels })
}

/// Assigns a pending execution to a consumer; returns the transition and the
/// `execution.assigned` push for that consumer.
pub fn assign(state: &ExecutionState, consumer_id: &str) -> Result<(Transition, Push), Rejection> {
    if state.status != ExecutionStatus::Pending {
        return Err(Rejection::NotPending(state.id.to_string()));
    }
    let session_id = SessionId::generate().into_string();
    let mut transition = Transition::default();
    transition.event(NewEvent::execution(EventBody::ExecutionStarted {
        session_id: session_id.clone(),
        consumer_id: consumer_id.to_owned(),
    }));
    let mut data = json!({
        "execution_id": state.id.as_str(),
        "session_id": session_id,
        "agent_id": state.agent_id.as_str(),
        "input": state.input,
    });
    if let Some(labels) = state.labels.as_ref().filter(|labels| !labels.is_empty()) {
        data["labels"] = json!(labels);
    }
    let history = history_json(state);
    if !history.is_empty() {
        data["history"] = Value::Array(history);
    }
    Ok((transition, Push { event: "execution.assigned", data }))
}

fn history_json(state: &ExecutionState) -> Vec<Value> {
    let start = state.history.len().saturating_sub(HISTORY_MAX_ENTRIES);
    let mut entries: Vec<Value> = state.history[start..]
        .iter()
        .map(|entry| {
            let mut item = json!({
                "step_id": entry.step_id.as_str(),
                "tool_id": entry.tool_id,
                "status": entry.status.as_str(),
                "completed_at": crate::time::format(&entry.completed_at),
            });
            if !entry.arguments.is_null() {
                item["arguments"] = entry.arguments.clone();
            }
            if let Some(result) = entry.result.as_ref().filter(|result| !result.is_null()) {
                item["result"] = result.clone();
            }
            if let Some(error) = entry.error.as_ref().filter(|error| !error.is_empty()) {
                item["error"] = json!(error);
            }
            item
        })
        .collect();
    let mut size: usize = entries.iter().map(|entry| entry.to_string().len()).sum();
    while size > HISTORY_MAX_BYTES && !entries.is_empty() {
        size -= entries.remove(0).to_string().len();
    }
    entries
}

/// Checks that `session_id` is the execution's current session. `owner` is the execution that
/// holds the session when it is not this one (looked up by the caller).
pub fn check_session(state: &ExecutionState, session_id: &str, owner: Option<&ExecutionId>) -> Result<(), Rejection> {
    if state.session.as_ref().is_some_and(|session| session.id == session_id) {
        return Ok(());
    }
    match owner {
        Some(owner) if owner != &state.id => Err(Rejection::SessionMismatch {
            session: session_id.to_owned(),
            execution: state.id.to_string(),
        }),
        _ => Err(Rejection::SessionNotFound(session_id.to_owned())),
    }
}

/// Checks an intent against the execution's state before policy runs. Returns `Some(reply)`
/// when the intent is an idempotent repeat that records nothing.
pub fn precheck_intent(state: &ExecutionState, intent: &Intent) -> Result<Option<IntentReply>, Rejection> {
    if state.status.is_terminal() {
        return Err(Rejection::Terminal { execution: state.id.to_string(), status: state.status });
    }
    if let Intent::Wait { signal_type } = intent
        && state.signal_wait.as_deref() == Some(signal_type.as_str()) {
            return Ok(Some(IntentReply::accepted()));
        }
    // `complete`/`fail` may abandon signal waits (WIRE.md corrections, item 18), not approvals.
    let finishing = matches!(intent, Intent::Complete { .. } | Intent::Fail { .. });
    if state.hard_blocked() && !(finishing && state.approval.is_none()) {
        return Err(Rejection::Blocked(state.id.to_string()));
    }
    match intent {
        Intent::Unknown { intent_type } => Err(Rejection::Validation(format!("unknown intent type {intent_type}"))),
        Intent::Invalid { message, .. } => Err(Rejection::Validation(message.clone())),
        Intent::InvokeTool { tool_id, idempotency_key: Some(key), remote, .. } => match state.intents.get(key) {
            None => Ok(None),
            Some(RecordedIntent::Accepted { step_id, tool_id: first_tool, remote: first_remote, pending_approval }) => {
                if first_tool != tool_id || first_remote != remote {
                    return Err(Rejection::IdempotencyConflict(key.clone()));
                }
                let reply = IntentReply {
                    accepted: true,
                    step_id: Some(step_id.clone()),
                    pending_approval: *pending_approval,
                    error: None,
                };
                Ok(Some(reply))
            }
            Some(RecordedIntent::Denied { tool_id: first_tool, error }) => {
                if first_tool != tool_id {
                    return Err(Rejection::IdempotencyConflict(key.clone()));
                }
                Ok(Some(IntentReply { accepted: false, error: Some(error.clone()), ..IntentReply::default() }))
            }
        },
        _ => Ok(None),
    }
}

/// Decides an intent that passed [`precheck_intent`]. `verdict` is the policy's answer for
/// `invoke_tool` (rate limits already folded into a deny).
pub fn intent(
    state: &ExecutionState,
    intent: &Intent,
    verdict: Option<&PolicyDecision>,
    now: Timestamp,
    settings: &ExecutionSettings,
) -> Result<(Transition, IntentReply), Rejection> {
    match intent {
        Intent::InvokeTool { tool_id, arguments, idempotency_key, remote } => {
            let Some(verdict) = verdict else {
                return Err(Rejection::Validation("invoke_tool needs a policy decision".to_owned()));
            };
            let call = ToolCall { tool_id, arguments, key: idempotency_key.as_ref(), remote: *remote };
            Ok(invoke_tool(state, &call, verdict, now, settings))
        }
        Intent::Complete { output } => finish(
            state,
            "complete",
            output.as_ref().map(|output| json!({ "output": output })),
            EventBody::ExecutionCompleted { output: output.clone().unwrap_or(Value::Null) },
        ),
        Intent::Fail { error } => {
            let text = fail_text(error.as_deref());
            finish(state, "fail", Some(json!({ "error": text })), EventBody::ExecutionFailed { error: text.clone() })
        }
        Intent::Wait { signal_type } => Ok(wait(state, signal_type)),
        Intent::Unknown { intent_type } => Err(Rejection::Validation(format!("unknown intent type {intent_type}"))),
        Intent::Invalid { message, .. } => Err(Rejection::Validation(message.clone())),
    }
}

struct ToolCall<'a> {
    tool_id: &'a str,
    arguments: &'a Value,
    key: Option<&'a String>,
    remote: bool,
}

fn invoke_tool(
    state: &ExecutionState,
    call: &ToolCall<'_>,
    verdict: &PolicyDecision,
    now: Timestamp,
    settings: &ExecutionSettings,
) -> (Transition, IntentReply) {
    let mut transition = Transition::default();
    let key = call.key.cloned();
    if verdict.decision == Decision::Deny {
        transition.event(NewEvent::execution(EventBody::IntentDenied {
            intent_type: "invoke_tool".to_owned(),
            tool_id: Some(call.tool_id.to_owned()),
            arguments: Some(call.arguments.clone()),
            idempotency_key: key.clone(),
            reason: verdict.reason.clone(),
            rule_id: verdict.rule_id.clone(),
        })
        .with_key(key));
        let error = super::state::denial_text(&verdict.reason, &verdict.rule_id);
        return (transition, IntentReply { accepted: false, error: Some(error), ..IntentReply::default() });
    }
    let step_id = StepId::generate();
    let step_timeout = verdict.timeout_ms.map(Duration::from_millis).unwrap_or(settings.step_timeout);
    let deadline = add(now, step_timeout);
    if verdict.decision == Decision::RequireApproval {
        let step_deadline = add(now, settings.step_timeout);
        let rule = RuleSettings { timeout_ms: verdict.timeout_ms, retry: None };
        transition.event(step_created(&step_id, call, 1, step_deadline, rule).with_key(key.clone()));
        transition.event(
            NewEvent::step(&step_id, EventBody::StepApprovalRequired {
                tool_id: call.tool_id.to_owned(),
                arguments: call.arguments.clone(),
                remote: call.remote,
                reason: verdict.reason.clone(),
            })
            .with_key(key),
        );
        transition.event(NewEvent::execution(EventBody::ExecutionBlocked {
            reason: "approval".to_owned(),
            reference: step_id.to_string(),
            tool_id: Some(call.tool_id.to_owned()),
            arguments: Some(call.arguments.clone()),
            remote: Some(call.remote),
        }));
        let reply = IntentReply { accepted: true, step_id: Some(step_id), pending_approval: true, error: None };
        return (transition, reply);
    }
    let mut details = json!({ "tool_id": call.tool_id });
    if !call.arguments.is_null() {
        details["arguments"] = call.arguments.clone();
    }
    if let Some(key) = call.key {
        details["idempotency_key"] = json!(key);
    }
    transition.event(NewEvent::execution(EventBody::IntentAccepted {
        intent_type: "invoke_tool".to_owned(),
        details: Some(details),
    }));
    let max_attempts = match (call.remote, verdict.retry) {
        (false, _) => 1,
        (true, Some(retry)) => i64::from(retry.max_attempts.max(1)),
        (true, None) => settings.remote_max_attempts,
    };
    let rule = RuleSettings { timeout_ms: verdict.timeout_ms, retry: verdict.retry.filter(|_| call.remote) };
    transition.event(step_created(&step_id, call, max_attempts, deadline, rule).with_key(key));
    if call.remote {
        let job_id = JobId::generate().into_string();
        transition.event(NewEvent::step(&step_id, EventBody::StepDispatched {
            runner_id: String::new(),
            job_id: job_id.clone(),
            deadline,
        }));
        transition.effect(Effect::EnqueueJob(JobSpec {
            job_id,
            execution_id: state.id.to_string(),
            step_id: step_id.clone(),
            attempt: 1,
            tool_id: call.tool_id.to_owned(),
            arguments: call.arguments.clone(),
            deadline,
            not_before: None,
        }));
    }
    if !state.tool_blocked {
        transition.event(NewEvent::execution(EventBody::ExecutionBlocked {
            reason: "tool".to_owned(),
            reference: step_id.to_string(),
            tool_id: None,
            arguments: None,
            remote: None,
        }));
    }
    (transition, IntentReply { accepted: true, step_id: Some(step_id), pending_approval: false, error: None })
}

/// What the matching policy rule says about a step beyond allow/deny, recorded in
/// `step.created` so that retries and approvals use it after a restart too.
struct RuleSettings {
    timeout_ms: Option<u64>,
    retry: Option<crate::policy::RetrySettings>,
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn step_created(
    step_id: &StepId,
    call: &ToolCall<'_>,
    max_attempts: i64,
    deadline: Timestamp,
    rule: RuleSettings,
) -> NewEvent {
    NewEvent::step(step_id, EventBody::StepCreated {
        tool_id: call.tool_id.to_owned(),
        tool_version: 0,
        arguments: call.arguments.clone(),
        max_attempts,
        attempt: 1,
        deadline,
        remote: call.remote,
        timeout_ms: rule.timeout_ms,
        retry_base_delay_ms: rule.retry.map(|retry| millis(retry.base_delay)),
        retry_max_delay_ms: rule.retry.map(|retry| millis(retry.max_delay)),
    })
}

fn finish(
    state: &ExecutionState,
    verb: &'static str,
    details: Option<Value>,
    terminal: EventBody,
) -> Result<(Transition, IntentReply), Rejection> {
    if state.active_steps().next().is_some() {
        return Err(Rejection::ActiveSteps(verb));
    }
    let mut transition = Transition::default();
    transition.event(NewEvent::execution(EventBody::IntentAccepted { intent_type: verb.to_owned(), details }));
    if state.signal_wait.is_some() {
        transition.event(NewEvent::execution(EventBody::ExecutionResumed { reason: "wait abandoned".to_owned() }));
    }
    transition.event(NewEvent::execution(terminal));
    end_session(state, &mut transition);
    Ok((transition, IntentReply::accepted()))
}

/// Returns the error recorded for a `fail` intent: a default for a missing or empty one, and at
/// most [`MAX_FAIL_ERROR_BYTES`] bytes cut at a character boundary.
pub fn fail_text(error: Option<&str>) -> String {
    let text = error.filter(|error| !error.is_empty()).unwrap_or("agent failed without a message");
    let mut end = text.len().min(MAX_FAIL_ERROR_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

fn wait(state: &ExecutionState, signal_type: &str) -> (Transition, IntentReply) {
    let mut transition = Transition::default();
    transition.event(NewEvent::execution(EventBody::IntentAccepted {
        intent_type: "wait".to_owned(),
        details: Some(json!({ "signal_type": signal_type })),
    }));
    let pending = state.pending_signals.iter().find(|(kind, _)| kind == signal_type);
    match pending {
        Some((_, payload)) => {
            transition.event(NewEvent::execution(EventBody::ExecutionResumed {
                reason: format!("signal received: {signal_type}"),
            }));
            transition.effect(Effect::PushToAgent(Push::signal_received(state.id.as_str(), signal_type, payload)));
        }
        None => transition.event(NewEvent::execution(EventBody::ExecutionBlocked {
            reason: "signal".to_owned(),
            reference: signal_type.to_owned(),
            tool_id: None,
            arguments: None,
            remote: None,
        })),
    }
    (transition, IntentReply::accepted())
}

fn end_session(state: &ExecutionState, transition: &mut Transition) {
    if let Some(session) = &state.session {
        transition.effect(Effect::SessionEnded { consumer_id: session.consumer_id.clone() });
    }
}

fn add(at: Timestamp, duration: Duration) -> Timestamp {
    chrono::Duration::from_std(duration).ok().and_then(|delta| at.checked_add_signed(delta)).unwrap_or(at)
}

/// Returns whether a step counts as an active tool step (a blocker of kind `tool`).
fn tool_active(step: &StepState) -> bool {
    !step.status.is_terminal() && !step.awaiting_approval
}

/// Adds `execution.resumed` (step completed) when ending `ended` leaves no active tool step.
fn resume_if_last_tool(state: &ExecutionState, ended: &[&StepId], transition: &mut Transition) {
    if !state.tool_blocked {
        return;
    }
    let others_active = state.steps.iter().any(|step| tool_active(step) && !ended.contains(&&step.id));
    if !others_active {
        transition.event(NewEvent::execution(EventBody::ExecutionResumed { reason: "step completed".to_owned() }));
    }
}

/// Records a step result reported by the agent that holds the session (local steps).
pub fn agent_step_result(state: &ExecutionState, outcome: &StepOutcome) -> Result<Transition, Rejection> {
    let step = state.step(&outcome.step_id).ok_or_else(|| Rejection::StepNotFound(outcome.step_id.to_string()))?;
    if step.status.is_terminal() {
        if step.outcome == Some(outcome.success) {
            return Ok(Transition::default());
        }
        return Err(Rejection::StepResolved);
    }
    if step.awaiting_approval {
        return Err(Rejection::AwaitingApproval(step.id.to_string()));
    }
    Ok(final_result(state, step, outcome))
}

/// Records a result reported by a runner; a retryable failure with attempts left schedules a
/// retry instead of reporting to the agent. `jitter` in `[0, 1]` places the retry delay
/// within its jitter range (see [`jittered_retry_delay`]); the caller draws it.
pub fn runner_result(
    state: &ExecutionState,
    outcome: &StepOutcome,
    now: Timestamp,
    settings: &ExecutionSettings,
    jitter: f64,
) -> Result<Transition, Rejection> {
    let step = state.step(&outcome.step_id).ok_or_else(|| Rejection::StepNotFound(outcome.step_id.to_string()))?;
    if step.status.is_terminal() {
        return Err(Rejection::StepResolved);
    }
    if step.awaiting_approval {
        return Err(Rejection::AwaitingApproval(step.id.to_string()));
    }
    if !outcome.success && outcome.retryable && step.attempt < step.max_attempts {
        return Ok(retry(state, step, outcome, now, settings, jitter));
    }
    Ok(final_result(state, step, outcome))
}

fn final_result(state: &ExecutionState, step: &StepState, outcome: &StepOutcome) -> Transition {
    let mut transition = Transition::default();
    let error = if outcome.success { None } else { Some(tool_error_text(outcome.error.as_deref())) };
    let body = match &error {
        None => EventBody::StepCompleted { result: outcome.data.clone().unwrap_or(Value::Null) },
        Some(error) => EventBody::StepFailed { error: error.clone(), retryable: false },
    };
    transition.event(NewEvent::step(&step.id, body));
    resume_if_last_tool(state, &[&step.id], &mut transition);
    let push = Push::tool_result(state.id.as_str(), step.id.as_str(), outcome.success, outcome.data.as_ref(), error.as_deref());
    transition.effect(Effect::PushToAgent(push));
    if step.remote {
        transition.effect(Effect::StepEnded { step_id: step.id.clone(), cancel_reason: None });
    }
    transition
}

/// Returns the error of a failed step: never empty (WIRE.md corrections, item 9).
pub fn tool_error_text(error: Option<&str>) -> String {
    error.filter(|error| !error.is_empty()).unwrap_or("tool failed without a message").to_owned()
}

/// Returns the delay before attempt `next_attempt`: base × 2^(n-2), capped (2 → base).
pub fn retry_delay(next_attempt: i64, base: Duration, cap: Duration) -> Duration {
    let exponent = u32::try_from(next_attempt.saturating_sub(2).clamp(0, 30)).unwrap_or(30);
    base.saturating_mul(2u32.saturating_pow(exponent)).min(cap)
}

/// Returns the delay before attempt `next_attempt` with equal jitter: the backoff `d` of
/// [`retry_delay`] scaled into `[d/2, d]` by `jitter` (0 → `d/2`, 1 → `d`), so it never
/// exceeds the cap.
pub fn jittered_retry_delay(next_attempt: i64, base: Duration, cap: Duration, jitter: f64) -> Duration {
    let ceiling = retry_delay(next_attempt, base, cap);
    let jitter = if jitter.is_finite() { jitter.clamp(0.0, 1.0) } else { 1.0 };
    ceiling.mul_f64(0.5 + 0.5 * jitter)
}

/// Returns the per-attempt deadline length of a step: its rule's, else the default.
fn step_timeout(step: &StepState, settings: &ExecutionSettings) -> Duration {
    step.timeout.unwrap_or(settings.step_timeout)
}

fn retry(
    state: &ExecutionState,
    step: &StepState,
    outcome: &StepOutcome,
    now: Timestamp,
    settings: &ExecutionSettings,
    jitter: f64,
) -> Transition {
    let mut transition = Transition::default();
    let next_attempt = step.attempt + 1;
    let base = step.retry_base_delay.unwrap_or(settings.retry_base_delay);
    let cap = step.retry_max_delay.unwrap_or(settings.retry_max_delay);
    let not_before = add(now, jittered_retry_delay(next_attempt, base, cap, jitter));
    transition.event(NewEvent::step(&step.id, EventBody::StepFailed {
        error: tool_error_text(outcome.error.as_deref()),
        retryable: true,
    }));
    transition.event(NewEvent::step(&step.id, EventBody::StepRetried { next_attempt, not_before: Some(not_before) }));
    transition.effect(Effect::StepEnded { step_id: step.id.clone(), cancel_reason: None });
    transition.effect(Effect::EnqueueJob(JobSpec {
        job_id: JobId::generate().into_string(),
        execution_id: state.id.to_string(),
        step_id: step.id.clone(),
        attempt: next_attempt,
        tool_id: step.tool_id.clone(),
        arguments: step.arguments.clone(),
        deadline: add(not_before, step_timeout(step, settings)),
        not_before: Some(not_before),
    }));
    transition
}

/// Handles a runner that went away holding `job_id` and did not come back: the job counts as a
/// retryable failure (re-queued while attempts remain, reported to the agent otherwise).
pub fn runner_lost(
    state: &ExecutionState,
    step_id: &StepId,
    job_id: &str,
    now: Timestamp,
    settings: &ExecutionSettings,
    jitter: f64,
) -> Option<Transition> {
    let step = state.step(step_id)?;
    if step.status.is_terminal() || step.job_id.as_deref() != Some(job_id) {
        return None;
    }
    let outcome = StepOutcome {
        step_id: step_id.clone(),
        success: false,
        data: None,
        error: Some("runner disconnected".to_owned()),
        retryable: true,
    };
    runner_result(state, &outcome, now, settings, jitter).ok()
}

/// Records that a runner started a step; a no-op for running or ended steps.
pub fn step_started(state: &ExecutionState, step_id: &StepId, runner_id: &str) -> Result<Transition, Rejection> {
    let step = state.step(step_id).ok_or_else(|| Rejection::StepNotFound(step_id.to_string()))?;
    let mut transition = Transition::default();
    if !step.status.is_terminal() && step.status != StepStatus::Running && !step.awaiting_approval {
        transition.event(NewEvent::step(step_id, EventBody::StepStarted { runner_id: runner_id.to_owned() }));
    }
    Ok(transition)
}

/// Checks that a queued job may still be delivered and returns the event recording its
/// delivery (if any). A job for an ended step, an older attempt or an ended execution is stale.
pub fn claim_job(
    state: &ExecutionState,
    job: &JobSpec,
    runner_id: &str,
    now: Timestamp,
    settings: &ExecutionSettings,
) -> Option<(Transition, JobSpec)> {
    if state.status.is_terminal() || state.status == ExecutionStatus::Pending {
        return None;
    }
    let step = state.step(&job.step_id)?;
    if step.status.is_terminal() || step.attempt != job.attempt || step.awaiting_approval {
        return None;
    }
    let mut transition = Transition::default();
    let mut delivered = job.clone();
    if step.status == StepStatus::Pending {
        let deadline = add(now, step_timeout(step, settings));
        delivered.deadline = deadline;
        transition.event(NewEvent::step(&step.id, EventBody::StepDispatched {
            runner_id: runner_id.to_owned(),
            job_id: job.job_id.clone(),
            deadline,
        }));
    } else if step.job_id.as_deref() != Some(job.job_id.as_str()) {
        return None;
    }
    Some((transition, delivered))
}

/// Records a signal; resolves a matching wait or the pending approval. `holder_lost` says the
/// consumer holding the session is gone for good (its grace ran out and it did not return).
pub fn signal(
    state: &ExecutionState,
    signal_type: &str,
    payload: &Value,
    now: Timestamp,
    settings: &ExecutionSettings,
    holder_lost: bool,
) -> Result<Transition, Rejection> {
    if state.status.is_terminal() {
        return Err(Rejection::TerminalSignal { execution: state.id.to_string(), status: state.status });
    }
    let approval = match (&state.approval, signal_type) {
        (Some(step_id), "step.approve") => Some(parse_approval(step_id, payload)?),
        _ => None,
    };
    let mut transition = Transition::default();
    transition.event(NewEvent::execution(EventBody::SignalReceived {
        signal_type: signal_type.to_owned(),
        payload: payload.clone(),
    }));
    let resumes = state.signal_wait.as_deref() == Some(signal_type);
    if resumes && holder_lost {
        // The handler waiting for this signal is gone: the execution is re-run elsewhere and the
        // signal stays pending, so the new run's `wait` is satisfied at once.
        let reset_transition = reset(state, "agent_disconnect");
        transition.events.extend(reset_transition.events);
        transition.effects.extend(reset_transition.effects);
        return Ok(transition);
    }
    if resumes {
        transition.event(NewEvent::execution(EventBody::ExecutionResumed {
            reason: format!("signal received: {signal_type}"),
        }));
    }
    transition.effect(Effect::PushToAgent(Push::signal_received(state.id.as_str(), signal_type, payload)));
    if let Some(approval) = approval {
        resolve_approval(state, &approval, now, settings, &mut transition);
    }
    Ok(transition)
}

struct Approval {
    step_id: StepId,
    approved: bool,
    reason: Option<String>,
}

fn parse_approval(blocked_on: &StepId, payload: &Value) -> Result<Approval, Rejection> {
    let object = match payload {
        Value::Object(object) => object.clone(),
        Value::Null => serde_json::Map::new(),
        _ => return Err(Rejection::Validation("step.approve payload must be a JSON object".to_owned())),
    };
    let given = object.get("step_id").and_then(Value::as_str).unwrap_or_default();
    if given != blocked_on.as_str() {
        return Err(Rejection::Validation(format!(
            "approval step_id \"{given}\" does not match blocked ref \"{blocked_on}\""
        )));
    }
    let approved = object.get("approved").and_then(Value::as_bool).unwrap_or(false);
    let reason = object.get("reason").and_then(Value::as_str).filter(|reason| !reason.is_empty()).map(str::to_owned);
    Ok(Approval { step_id: blocked_on.clone(), approved, reason })
}

fn resolve_approval(
    state: &ExecutionState,
    approval: &Approval,
    now: Timestamp,
    settings: &ExecutionSettings,
    transition: &mut Transition,
) {
    let Some(step) = state.step(&approval.step_id) else {
        return;
    };
    if approval.approved {
        let deadline = add(now, step_timeout(step, settings));
        let job_id = step.remote.then(|| JobId::generate().into_string());
        transition.event(NewEvent::step(&step.id, EventBody::StepDispatched {
            runner_id: String::new(),
            job_id: job_id.clone().unwrap_or_default(),
            deadline,
        }));
        transition.event(NewEvent::execution(EventBody::ExecutionResumed { reason: "approval granted".to_owned() }));
        if !state.tool_blocked {
            transition.event(NewEvent::execution(EventBody::ExecutionBlocked {
                reason: "tool".to_owned(),
                reference: step.id.to_string(),
                tool_id: None,
                arguments: None,
                remote: None,
            }));
        }
        if let Some(job_id) = job_id {
            transition.effect(Effect::EnqueueJob(JobSpec {
                job_id,
                execution_id: state.id.to_string(),
                step_id: step.id.clone(),
                attempt: step.attempt,
                tool_id: step.tool_id.clone(),
                arguments: step.arguments.clone(),
                deadline,
                not_before: None,
            }));
        }
    } else {
        let error = approval.reason.clone().unwrap_or_else(|| "approval denied by human".to_owned());
        transition.event(NewEvent::step(&step.id, EventBody::StepFailed { error, retryable: false }));
        transition.event(NewEvent::execution(EventBody::ExecutionResumed { reason: "approval denied".to_owned() }));
    }
    let session_id = state.session.as_ref().map(|session| session.id.clone()).unwrap_or_default();
    let push = Push::approval_resolved(state.id.as_str(), step.id.as_str(), approval.approved, &session_id);
    transition.effect(Effect::PushToAgent(push));
}

/// Cancels every active step with `reason`, adding the events and runner notices.
fn cancel_steps(state: &ExecutionState, reason: &str, except: Option<&StepId>, transition: &mut Transition) {
    for step in state.active_steps() {
        if Some(&step.id) == except {
            continue;
        }
        transition.event(NewEvent::step(&step.id, EventBody::StepCancelled { reason: reason.to_owned() }));
        if step.remote {
            transition.effect(Effect::StepEnded { step_id: step.id.clone(), cancel_reason: Some(reason.to_owned()) });
        }
    }
}

/// Ends the execution from the kernel side (cancel, timeouts, supervision): cancels steps,
/// records the terminal event and tells the agent.
fn terminate(state: &ExecutionState, step_reason: &str, terminal: EventBody, transition: &mut Transition) {
    cancel_steps(state, step_reason, None, transition);
    transition.event(NewEvent::execution(terminal));
    if state.session.is_some() {
        transition.effect(Effect::PushToAgent(Push::execution_cancelled(state.id.as_str())));
    }
    end_session(state, transition);
}

/// Cancels the execution on request.
pub fn cancel(state: &ExecutionState) -> Result<Transition, Rejection> {
    if state.status.is_terminal() {
        return Err(Rejection::Terminal { execution: state.id.to_string(), status: state.status });
    }
    let mut transition = Transition::default();
    let terminal = EventBody::ExecutionCancelled { reason: "cancelled by request".to_owned() };
    terminate(state, "execution cancelled", terminal, &mut transition);
    Ok(transition)
}

/// Fails the execution because the kernel gave up on it (crash loop, supervision).
pub fn fail_by_kernel(state: &ExecutionState, error: &str) -> Option<Transition> {
    if state.status.is_terminal() {
        return None;
    }
    let mut transition = Transition::default();
    terminate(state, "execution failed", EventBody::ExecutionFailed { error: error.to_owned() }, &mut transition);
    Some(transition)
}

/// Handles a step deadline: times the step out and fails the execution. `None` when the
/// deadline no longer applies (step ended, deadline moved, or a signal/approval blocks).
pub fn step_deadline(state: &ExecutionState, step_id: &StepId, now: Timestamp) -> Option<Transition> {
    if state.status.is_terminal() || state.hard_blocked() {
        return None;
    }
    let step = state.step(step_id)?;
    let deadline = step.deadline?;
    if step.status.is_terminal() || deadline > now {
        return None;
    }
    let mut transition = Transition::default();
    transition.event(NewEvent::step(step_id, EventBody::StepTimedOut {}));
    if step.remote {
        transition.effect(Effect::StepEnded { step_id: step_id.clone(), cancel_reason: Some("step timed out".to_owned()) });
    }
    cancel_steps(state, "sibling step timed out", Some(step_id), &mut transition);
    transition.event(NewEvent::execution(EventBody::ExecutionFailed { error: "step timed out".to_owned() }));
    if state.session.is_some() {
        transition.effect(Effect::PushToAgent(Push::execution_cancelled(state.id.as_str())));
    }
    end_session(state, &mut transition);
    Some(transition)
}

/// Handles the execution deadline.
pub fn execution_deadline(state: &ExecutionState, deadline: Timestamp, now: Timestamp) -> Option<Transition> {
    if state.status.is_terminal() || deadline > now {
        return None;
    }
    let mut transition = Transition::default();
    let terminal = EventBody::ExecutionFailed { error: "execution exceeded maximum duration".to_owned() };
    terminate(state, "execution timed out", terminal, &mut transition);
    Some(transition)
}

/// Handles the loss of the consumer holding the session (after the disconnect grace). A
/// running execution goes back to pending; a blocked one keeps its session for a reconnect.
pub fn consumer_lost(state: &ExecutionState, consumer_id: &str, reason: &str) -> Option<Transition> {
    let session = state.session.as_ref().filter(|session| session.consumer_id == consumer_id)?;
    if state.status.is_terminal() {
        return None;
    }
    let mut transition = Transition::default();
    if !state.session_lost {
        transition.event(NewEvent::execution(EventBody::AgentTimeout { session_id: session.id.clone() }));
    }
    if state.hard_blocked() {
        return (!transition.events.is_empty()).then_some(transition);
    }
    let reset_transition = reset(state, reason);
    transition.events.extend(reset_transition.events);
    transition.effects.extend(reset_transition.effects);
    Some(transition)
}

/// Returns the events that put a running execution back to `pending`.
pub fn reset(state: &ExecutionState, reason: &str) -> Transition {
    let mut transition = Transition::default();
    cancel_steps(state, "agent disconnected", None, &mut transition);
    transition.event(NewEvent::execution(EventBody::ExecutionReset {
        reason: reason.to_owned(),
        from_status: state.status.as_str().to_owned(),
    }));
    end_session(state, &mut transition);
    transition.effect(Effect::BecamePending);
    transition
}
