//! A call of a re-run that the journal holds: accepted and recorded as a step that replays the
//! earlier one (`step.created` with `replay_of`, then its recorded `step.completed` or
//! `step.failed`, in one batch), and the recorded `tool.result` pushed to the agent at once.
//! No job, approval, rate-limit slot, budget charge or breaker count.

use super::super::commands::{Effect, IntentReply};
use super::super::journal::JournalEntry;
use super::super::state::ExecutionState;
use super::*;
use crate::events::{EventBody, NewEvent};
use crate::ids::{StepId, ToolId};
use crate::push::Push;
use crate::time::Timestamp;
use serde_json::{Value, json};

/// A call of the current run that the journal answers.
pub struct ReplayedCall<'a> {
    /// Tool asked for.
    pub tool_id: &'a ToolId,
    /// Arguments as given.
    pub arguments: &'a Value,
    /// Idempotency key of the intent.
    pub key: Option<&'a String>,
    /// Whether the call is remote.
    pub remote: bool,
}

/// Returns the journal entry a call of the current run replays, if any.
pub fn replayable<'a>(
    state: &'a ExecutionState,
    tool_id: &ToolId,
    arguments: &Value,
) -> Option<&'a JournalEntry> {
    state.journal.as_ref()?.lookup(tool_id, arguments)
}

/// Records the replay of `entry` for `call` and pushes its recorded result.
pub fn replay_call(
    state: &ExecutionState,
    call: &ReplayedCall<'_>,
    entry: &JournalEntry,
    now: Timestamp,
) -> (Transition, IntentReply) {
    let mut transition = Transition::default();
    let step_id = StepId::generate();
    let key = call.key.cloned();
    let mut details = json!({ "tool_id": call.tool_id, "replay_of": entry.step_id });
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
    transition.event(
        NewEvent::step(
            &step_id,
            EventBody::StepCreated {
                tool_id: call.tool_id.clone(),
                tool_version: 0,
                arguments: call.arguments.clone(),
                max_attempts: 1,
                attempt: 1,
                deadline: now,
                remote: call.remote,
                timeout_ms: None,
                retry_base_delay_ms: None,
                retry_max_delay_ms: None,
                max_retries: None,
                replay_of: Some(entry.step_id.clone()),
                key_of: state
                    .journal
                    .as_ref()
                    .and_then(|journal| journal.key_of(call.tool_id, call.arguments))
                    .cloned(),
                repeats: None,
                proposed_arguments: None,
                at_most_once: false,
            },
        )
        .with_key(key),
    );
    let error = (!entry.success).then(|| tool_error_text(entry.error.as_deref()));
    let body = match &error {
        None => EventBody::StepCompleted {
            result: entry.result.clone().unwrap_or(Value::Null),
            cost: None,
        },
        Some(error) => EventBody::StepFailed {
            error: error.clone(),
            retryable: false,
            cost: None,
        },
    };
    transition.event(NewEvent::step(&step_id, body));
    if entry.approval_denied {
        // Denied by an operator: the agent hears that denial again, as a live call would.
        let session_id = state
            .session
            .as_ref()
            .map(|session| session.id.clone())
            .unwrap_or_default();
        transition.effect(Effect::PushToAgent(Push::approval_resolved(
            &state.id,
            &step_id,
            false,
            entry.error.as_deref(),
            &session_id,
        )));
    } else {
        transition.effect(Effect::PushToAgent(Push::tool_result(
            &state.id,
            &step_id,
            entry.success,
            entry.result.as_ref(),
            error.as_deref(),
        )));
    }
    let reply = IntentReply {
        accepted: true,
        step_id: Some(step_id),
        pending_approval: entry.approval_denied,
        error: None,
        ..IntentReply::default()
    };
    (transition, reply)
}

/// Returns the payload an earlier run's `wait` for `signal_type` consumed that this run's next
/// `wait` for it gets again, if any.
pub fn replayable_signal<'a>(state: &'a ExecutionState, signal_type: &str) -> Option<&'a Value> {
    state.journal.as_ref()?.signal(signal_type)
}

/// Answers a `wait` of a re-run with the signal an earlier run consumed: accepted without
/// blocking (`intent.accepted` with `replay: true`) and the recorded `signal.received` pushed.
pub fn replay_wait(state: &ExecutionState, signal_type: &str, payload: &Value) -> Transition {
    let mut transition = Transition::default();
    transition.event(NewEvent::execution(EventBody::IntentAccepted {
        intent_type: "wait".to_owned(),
        details: Some(json!({ "signal_type": signal_type, "replay": true })),
    }));
    transition.effect(Effect::PushToAgent(Push::signal_received(
        &state.id,
        signal_type,
        payload,
    )));
    transition
}

/// Returns the step of an earlier run whose granted approval this call reuses, if any.
pub fn reusable_grant<'a>(
    state: &'a ExecutionState,
    tool_id: &ToolId,
    arguments: &Value,
) -> Option<&'a StepId> {
    state.journal.as_ref()?.grant(tool_id, arguments)
}
