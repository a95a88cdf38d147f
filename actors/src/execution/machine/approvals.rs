//! The approval as an object on the feed: `approval.requested` when a rule asks for one (and
//! again, to other approvers, when an `on_expiry: escalate` approval expires), and
//! `approval.resolved` when it is answered or expires.

use super::invoke::ToolCall;
use super::*;
use crate::approvals::ApprovalTerms;
use crate::events::{ApprovalRequest, ApprovalResolution};
use crate::policy::PolicyDecision;

/// The id of the approval of `step_id`, as the approvals API takes it.
pub(super) fn approval_id(state: &ExecutionState, step_id: &StepId) -> String {
    format!("{}.{}", state.id, step_id)
}

/// `approval.requested` for the approval a rule just asked for.
pub(super) fn requested(
    state: &ExecutionState,
    step_id: &StepId,
    call: &ToolCall<'_>,
    verdict: &PolicyDecision,
    terms: Option<&ApprovalTerms>,
    now: Timestamp,
) -> NewEvent {
    let request = ApprovalRequest {
        approval_id: approval_id(state, step_id),
        tool_id: call.tool_id.clone(),
        arguments_digest: crate::approvals::arguments_digest(call.arguments),
        rule_id: verdict.rule_id.clone(),
        reason: verdict.reason.clone(),
        approvers: terms
            .map(|terms| terms.approvers.clone())
            .filter(|approvers| !approvers.is_empty()),
        expires_at: terms
            .and_then(|terms| terms.expires_after)
            .map(|after| add(now, after)),
        on_expiry: terms.and_then(ApprovalTerms::on_expiry),
        escalation: terms.and_then(|terms| terms.escalation.clone()),
        self_approval: terms.is_some_and(|terms| terms.self_approval),
        escalated: false,
    };
    NewEvent::step(step_id, EventBody::ApprovalRequested(Box::new(request)))
}

/// `approval.resolved` for the approval of `step_id`.
pub(super) fn resolved(
    state: &ExecutionState,
    step_id: &StepId,
    decision: &str,
    approver: Option<String>,
    reason: Option<String>,
) -> NewEvent {
    let resolution = ApprovalResolution {
        approval_id: approval_id(state, step_id),
        decision: decision.to_owned(),
        approver,
        reason,
    };
    NewEvent::step(step_id, EventBody::ApprovalResolved(Box::new(resolution)))
}

/// The escalation of the approval the execution waits for, when it expired by `now` and its
/// rule says `on_expiry: escalate` (and it was not escalated already): the same approval asked
/// again of the escalation's approvers, expiring after the escalation's time (then denied).
pub(super) fn escalation(state: &ExecutionState, now: Timestamp) -> Option<Transition> {
    let step_id = state.approval.as_ref()?;
    let current = state.approval_request(step_id)?;
    if current.escalated || current.on_expiry.as_deref() != Some("escalate") {
        return None;
    }
    let escalation = current.escalation.clone()?;
    let request = ApprovalRequest {
        approvers: Some(escalation.approvers.clone()).filter(|approvers| !approvers.is_empty()),
        expires_at: Some(add(now, Duration::from_millis(escalation.expires_in_ms))),
        on_expiry: Some("deny".to_owned()),
        escalation: None,
        escalated: true,
        ..current.clone()
    };
    let mut transition = Transition::default();
    transition.event(NewEvent::step(
        step_id,
        EventBody::ApprovalRequested(Box::new(request)),
    ));
    Some(transition)
}
