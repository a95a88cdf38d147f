//! Assignment and agent intents: session checks, `invoke_tool` (policy verdicts, approvals,
//! idempotency), `complete`, `fail` and `wait`.

use super::super::commands::{Effect, ExecutionSettings, Intent, IntentReply};
use super::super::rejection::Rejection;
use super::super::state::{ExecutionState, RecordedIntent};
use super::invoke::{ToolCall, invoke_tool};
use super::*;
use crate::events::{BlockReason, EventBody, NewEvent, ResumeReason};
use crate::ids::{AgentId, ConsumerId, ExecutionId, SessionId};
use crate::policy::PolicyDecision;
use crate::push::Push;
use crate::status::ExecutionStatus;
use crate::time::Timestamp;
use serde_json::{Value, json};

/// Returns the first event of a new execution; a creation `Idempotency-Key` is stored as the
/// event's idempotency key (unique among `execution.created` events).
pub fn create(
    agent_id: &AgentId,
    input: Value,
    labels: Value,
    options: crate::guardrails::CreateOptions,
    traceparent: Option<String>,
) -> NewEvent {
    NewEvent::execution(EventBody::ExecutionCreated {
        agent_id: agent_id.to_owned(),
        input,
        labels,
        priority: options.priority,
        traceparent,
        created_by: options.created_by,
        on_behalf_of: options.on_behalf_of,
    })
    .with_key(options.idempotency_key)
}

/// Assigns a pending execution to a consumer; returns the transition and the
/// `execution.assigned` push for that consumer.
pub fn assign(
    state: &ExecutionState,
    consumer_id: &ConsumerId,
) -> Result<(Transition, Push), Rejection> {
    if state.status != ExecutionStatus::Pending {
        return Err(Rejection::NotPending(state.id.to_string()));
    }
    let session_id = SessionId::generate();
    let mut transition = Transition::default();
    transition.event(NewEvent::execution(EventBody::ExecutionStarted {
        session_id: session_id.clone(),
        consumer_id: consumer_id.clone(),
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
    Ok((
        transition,
        Push {
            event: "execution.assigned",
            data,
        },
    ))
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
pub fn check_session(
    state: &ExecutionState,
    session_id: &SessionId,
    owner: Option<&ExecutionId>,
) -> Result<(), Rejection> {
    if state
        .session
        .as_ref()
        .is_some_and(|session| session.id == session_id)
    {
        return Ok(());
    }
    match owner {
        Some(owner) if owner != &state.id => Err(Rejection::SessionMismatch {
            session: session_id.to_string(),
            execution: state.id.to_string(),
        }),
        _ => Err(Rejection::SessionNotFound(session_id.to_string())),
    }
}

/// Checks an intent against the execution's state before policy runs. Returns `Some(reply)`
/// when the intent is an idempotent repeat that records nothing.
pub fn precheck_intent(
    state: &ExecutionState,
    intent: &Intent,
) -> Result<Option<IntentReply>, Rejection> {
    if state.status.is_terminal() {
        return Err(Rejection::Terminal {
            execution: state.id.to_string(),
            status: state.status,
        });
    }
    if let Intent::Wait { signal_type } = intent
        && state.signal_wait.as_deref() == Some(signal_type.as_str())
    {
        return Ok(Some(IntentReply::accepted()));
    }
    // `complete`/`fail` may abandon signal waits (WIRE.md corrections, item 18), not approvals.
    let finishing = matches!(intent, Intent::Complete { .. } | Intent::Fail { .. });
    if state.hard_blocked() && !(finishing && state.approval.is_none()) {
        return Err(Rejection::Blocked(state.id.to_string()));
    }
    match intent {
        Intent::Unknown { intent_type } => Err(Rejection::Validation(format!(
            "unknown intent type {intent_type}"
        ))),
        Intent::Invalid { message, .. } => Err(Rejection::Validation(message.clone())),
        Intent::InvokeTool {
            tool_id,
            idempotency_key: Some(key),
            remote,
            ..
        } => match state.intents.get(key) {
            None => Ok(None),
            Some(RecordedIntent::Accepted {
                step_id,
                tool_id: first_tool,
                remote: first_remote,
                pending_approval,
            }) => {
                if first_tool != tool_id || first_remote != remote {
                    return Err(Rejection::IdempotencyConflict(key.clone()));
                }
                let reply = IntentReply {
                    accepted: true,
                    step_id: Some(step_id.clone()),
                    pending_approval: *pending_approval,
                    error: None,
                    ..IntentReply::default()
                };
                Ok(Some(reply))
            }
            Some(RecordedIntent::Denied {
                tool_id: first_tool,
                error,
            }) => {
                if first_tool != tool_id {
                    return Err(Rejection::IdempotencyConflict(key.clone()));
                }
                Ok(Some(IntentReply {
                    accepted: false,
                    error: Some(error.clone()),
                    ..IntentReply::default()
                }))
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
    proposed_intent(state, intent, None, verdict, now, settings)
}

/// [`intent`] for an `invoke_tool` whose arguments a `pre_tool` hook replaced: `proposed` are
/// the agent's own, the call's identity in the journal (recorded on `step.created`).
pub fn proposed_intent(
    state: &ExecutionState,
    intent: &Intent,
    proposed: Option<&Value>,
    verdict: Option<&PolicyDecision>,
    now: Timestamp,
    settings: &ExecutionSettings,
) -> Result<(Transition, IntentReply), Rejection> {
    match intent {
        Intent::InvokeTool {
            tool_id,
            arguments,
            idempotency_key,
            remote,
        } => {
            let Some(verdict) = verdict else {
                return Err(Rejection::Validation(
                    "invoke_tool needs a policy decision".to_owned(),
                ));
            };
            let journal = state.journal.as_ref();
            let identity = proposed.unwrap_or(arguments);
            let key_of = journal
                .and_then(|journal| journal.key_of(tool_id, identity))
                .cloned();
            let repeats = journal
                .and_then(|journal| journal.lookup(tool_id, identity))
                .map(|entry| entry.step_id.clone());
            let in_doubt_of = journal
                .and_then(|journal| journal.in_doubt(tool_id, identity))
                .cloned();
            let call = ToolCall {
                tool_id,
                arguments,
                proposed,
                key: idempotency_key.as_ref(),
                remote: *remote,
                key_of,
                repeats,
                in_doubt_of,
            };
            Ok(invoke_tool(state, &call, verdict, now, settings))
        }
        Intent::Complete { output } => finish(
            state,
            "complete",
            output.as_ref().map(|output| json!({ "output": output })),
            EventBody::ExecutionCompleted {
                output: output.clone().unwrap_or(Value::Null),
            },
        ),
        Intent::Fail { error } => {
            let text = fail_text(error.as_deref());
            finish(
                state,
                "fail",
                Some(json!({ "error": text })),
                EventBody::ExecutionFailed {
                    error: text.clone(),
                },
            )
        }
        Intent::Wait { signal_type } => Ok(wait(state, signal_type)),
        Intent::Unknown { intent_type } => Err(Rejection::Validation(format!(
            "unknown intent type {intent_type}"
        ))),
        Intent::Invalid { message, .. } => Err(Rejection::Validation(message.clone())),
    }
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
    transition.event(NewEvent::execution(EventBody::IntentAccepted {
        intent_type: verb.to_owned(),
        details,
    }));
    if state.signal_wait.is_some() {
        transition.event(NewEvent::execution(EventBody::ExecutionResumed {
            reason: ResumeReason::WaitAbandoned,
        }));
    }
    transition.event(NewEvent::execution(terminal));
    end_session(state, &mut transition);
    Ok((transition, IntentReply::accepted()))
}

/// Returns the error recorded for a `fail` intent: a default for a missing or empty one, and at
/// most [`MAX_FAIL_ERROR_BYTES`] bytes cut at a character boundary.
pub fn fail_text(error: Option<&str>) -> String {
    let text = error
        .filter(|error| !error.is_empty())
        .unwrap_or("agent failed without a message");
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
    let pending = state
        .pending_signals
        .iter()
        .find(|(kind, _)| kind == signal_type);
    match pending {
        Some((_, payload)) => {
            transition.event(NewEvent::execution(EventBody::ExecutionResumed {
                reason: ResumeReason::SignalReceived(signal_type.to_owned()),
            }));
            transition.effect(Effect::PushToAgent(Push::signal_received(
                &state.id,
                signal_type,
                payload,
            )));
        }
        None => transition.event(NewEvent::execution(EventBody::ExecutionBlocked {
            reason: BlockReason::Signal,
            reference: signal_type.to_owned(),
            tool_id: None,
            arguments: None,
            remote: None,
        })),
    }
    (transition, IntentReply::accepted())
}
