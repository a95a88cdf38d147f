//! Signals: waits resumed or re-run, the `step.approve` approval flow and the `budget.approve`
//! answer to a budget wait.

use super::super::commands::{Effect, ExecutionSettings, JobSpec};
use super::super::rejection::Rejection;
use super::super::state::ExecutionState;
use super::*;
use crate::events::{BlockReason, EventBody, NewEvent, ResumeReason};
use crate::ids::{JobId, RunnerId, StepId};
use crate::push::Push;
use crate::time::Timestamp;
use serde_json::Value;

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
        return Err(Rejection::TerminalSignal {
            execution: state.id.to_string(),
            status: state.status,
        });
    }
    if signal_type == "step.approve" {
        answered_before(state, payload)?;
        if let (Some(step_id), Some(expiry)) = (&state.approval, state.approval_expiry())
            && expiry <= now
        {
            return Err(Rejection::ApprovalExpired(step_id.to_string()));
        }
    }
    let approval = match (&state.approval, signal_type) {
        (Some(step_id), "step.approve") => Some(parse_approval(step_id, payload)?),
        _ => None,
    };
    let budget_answer = if signal_type == super::llm::BUDGET_APPROVE {
        super::llm::budget_answer(state, payload)?
    } else {
        None
    };
    let mut transition = Transition::default();
    transition.event(NewEvent::execution(EventBody::SignalReceived {
        signal_type: signal_type.to_owned(),
        payload: payload.clone(),
        sent_by: None,
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
            reason: ResumeReason::SignalReceived(signal_type.to_owned()),
        }));
    }
    transition.effect(Effect::PushToAgent(Push::signal_received(
        &state.id,
        signal_type,
        payload,
    )));
    if let Some(approval) = approval {
        resolve_approval(state, &approval, now, settings, &mut transition);
    }
    for event in budget_answer.into_iter().flatten() {
        transition.event(event);
    }
    Ok(transition)
}

/// Refuses a `step.approve` naming a step of this execution that asked for approval and is no
/// longer waiting for it: an approval is answered once (a second answer changes nothing). A
/// step id the execution does not know keeps the old behaviour (a plain signal, or a 400 while
/// another approval waits).
fn answered_before(state: &ExecutionState, payload: &Value) -> Result<(), Rejection> {
    let Some(named) = payload.get("step_id").and_then(Value::as_str) else {
        return Ok(());
    };
    if state
        .approval
        .as_ref()
        .is_some_and(|waiting| waiting.as_str() == named)
    {
        return Ok(());
    }
    match state.steps.iter().find(|step| step.id.as_str() == named) {
        Some(step) if step.approval_requested => Err(Rejection::ApprovalAnswered(named.to_owned())),
        _ => Ok(()),
    }
}

/// Ends the approval the execution waits for once its expiry passed: with `on_expiry:
/// escalate` (not escalated yet) it is asked again of the escalation's approvers; otherwise
/// (`deny`) the step fails with `approval expired`, as a denial would, and the agent is told.
/// `None` when nothing expired by `now`.
pub fn approval_expired(
    state: &ExecutionState,
    now: Timestamp,
    settings: &ExecutionSettings,
) -> Option<Transition> {
    let step_id = state.approval.clone()?;
    if state.status.is_terminal() || state.approval_expiry()? > now {
        return None;
    }
    if let Some(escalation) = super::approvals::escalation(state, now) {
        return Some(escalation);
    }
    let mut transition = Transition::default();
    let expired = Approval {
        step_id,
        approved: false,
        reason: Some("approval expired".to_owned()),
        approver: Some(crate::principal::SYSTEM.to_owned()),
        expired: true,
    };
    resolve_approval(state, &expired, now, settings, &mut transition);
    Some(transition)
}

struct Approval {
    step_id: StepId,
    approved: bool,
    reason: Option<String>,
    /// Who answered (`answered_by` of the payload; `system` for an expiry).
    approver: Option<String>,
    /// Whether the approval expired (no one answered).
    expired: bool,
}

fn parse_approval(blocked_on: &StepId, payload: &Value) -> Result<Approval, Rejection> {
    let object = match payload {
        Value::Object(object) => object.clone(),
        Value::Null => serde_json::Map::new(),
        _ => {
            return Err(Rejection::Validation(
                "step.approve payload must be a JSON object".to_owned(),
            ));
        }
    };
    let given = object
        .get("step_id")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if given != blocked_on.as_str() {
        return Err(Rejection::Validation(format!(
            "approval step_id \"{given}\" does not match blocked ref \"{blocked_on}\""
        )));
    }
    let approved = object
        .get("approved")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let reason = object
        .get("reason")
        .and_then(Value::as_str)
        .filter(|reason| !reason.is_empty())
        .map(str::to_owned);
    let approver = object
        .get("answered_by")
        .and_then(Value::as_str)
        .map(str::to_owned);
    Ok(Approval {
        step_id: blocked_on.clone(),
        approved,
        reason,
        approver,
        expired: false,
    })
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
        let deadline = add(now, super::steps::step_timeout(step, settings));
        let job_id = step.remote.then(JobId::generate);
        transition.event(NewEvent::step(
            &step.id,
            EventBody::StepDispatched {
                runner_id: RunnerId::default(),
                job_id: job_id.clone().unwrap_or_default(),
                deadline,
            },
        ));
        transition.event(NewEvent::execution(EventBody::ExecutionResumed {
            reason: ResumeReason::ApprovalGranted,
        }));
        if !state.tool_blocked {
            transition.event(NewEvent::execution(EventBody::ExecutionBlocked {
                reason: BlockReason::Tool,
                reference: step.id.to_string(),
                tool_id: None,
                arguments: None,
                remote: None,
            }));
        }
        if let Some(job_id) = job_id {
            transition.effect(Effect::EnqueueJob(JobSpec {
                job_id,
                execution_id: state.id.clone(),
                step_id: step.id.clone(),
                attempt: step.attempt,
                tool_id: step.tool_id.clone(),
                arguments: step.arguments.clone(),
                deadline,
                not_before: None,
                traceparent: None,
                idempotency_key: None,
            }));
        }
    } else {
        let error = approval
            .reason
            .clone()
            .unwrap_or_else(|| "approval denied by human".to_owned());
        transition.event(NewEvent::step(
            &step.id,
            EventBody::StepFailed {
                error,
                retryable: false,
                cost: None,
            },
        ));
        transition.event(NewEvent::execution(EventBody::ExecutionResumed {
            reason: ResumeReason::ApprovalDenied,
        }));
    }
    let decision = match (approval.approved, approval.expired) {
        (true, _) => "approved",
        (false, false) => "denied",
        (false, true) => "expired",
    };
    transition.event(super::approvals::resolved(
        state,
        &step.id,
        decision,
        approval.approver.clone(),
        approval.reason.clone(),
    ));
    let session_id = state
        .session
        .as_ref()
        .map(|session| session.id.clone())
        .unwrap_or_default();
    let push = Push::approval_resolved(
        &state.id,
        &step.id,
        approval.approved,
        approval.reason.as_deref(),
        &session_id,
    );
    transition.effect(Effect::PushToAgent(push));
}
