//! What the approvals inbox and the execution page show for one pending approval: who may
//! answer it, and for the signed-in key either the approve/deny controls or why it gets none.
//! The decision is the kernel's own check ([`crate::http::approvals::refusal`]) against the
//! approval's terms and the execution's creator, so the console offers only answers the
//! kernel would take.

use std::collections::BTreeMap;

use keel_actors::events::EventBody;
use keel_actors::ids::ExecutionId;
use maud::{Markup, html};
use serde_json::Value;

use super::api::ApprovalBody;
use super::viewer::{Offer, Viewer};
use crate::http::approvals::Refusal;
use crate::http::{ApiError, AppState};

/// The creators of the executions of `approvals` whose answer depends on who created them
/// (the viewer's role answers, and the rule forbids self-approval), read once per execution.
pub async fn creators(
    state: &AppState,
    viewer: &Viewer,
    approvals: &[ApprovalBody],
) -> Result<BTreeMap<String, Option<String>>, ApiError> {
    let mut found = BTreeMap::new();
    if !viewer.answers() {
        return Ok(found);
    }
    for approval in approvals.iter().filter(|approval| !approval.self_approval) {
        if !found.contains_key(&approval.execution_id) {
            let creator = creator(state, &approval.execution_id).await?;
            found.insert(approval.execution_id.clone(), creator);
        }
    }
    Ok(found)
}

/// The key that created an execution, as its `execution.created` event records it (the
/// execution's state takes it from there too).
async fn creator(state: &AppState, id: &str) -> Result<Option<String>, ApiError> {
    let first = state
        .kernel
        .events(&ExecutionId::new(id.to_owned()), 0, 1)
        .await?;
    Ok(first.into_iter().next().and_then(|event| match event.body {
        EventBody::ExecutionCreated { created_by, .. } => created_by,
        _ => None,
    }))
}

/// What `viewer` is offered for `approval` (`creators` from [`creators`]).
pub fn offer(
    viewer: &Viewer,
    approval: &ApprovalBody,
    creators: &BTreeMap<String, Option<String>>,
) -> Offer {
    let creator = creators
        .get(&approval.execution_id)
        .and_then(Option::as_deref);
    viewer.offer(approval.approvers.as_ref(), approval.self_approval, creator)
}

/// The approve/deny controls, or why the viewer has none (nothing for a role that does not
/// answer approvals).
pub fn controls(offer: Offer, approval: &ApprovalBody) -> Markup {
    html! {
        @match offer {
            Offer::Decide => (decision(&approval.execution_id, &approval.step_id)),
            Offer::Refused(Refusal::NotAnApprover) => {
                span class="muted" data-not-yours { "not among its approvers" }
            }
            Offer::Refused(Refusal::OwnExecution) => {
                span class="muted" data-own-request {
                    "you requested this: the policy does not let the key that created an execution answer its approvals"
                }
            }
            Offer::ReadOnly => {}
        }
    }
}

/// `roles: operator; keys: boss`, or `any approver` when the rule names nobody.
pub fn approvers_text(approvers: Option<&Value>) -> String {
    let list = |name: &str| -> Vec<String> {
        approvers
            .and_then(|value| value[name].as_array())
            .map(|items| {
                items
                    .iter()
                    .filter_map(|item| item.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let (roles, keys) = (list("roles"), list("keys"));
    let mut parts = Vec::new();
    if !roles.is_empty() {
        parts.push(format!("roles: {}", roles.join(", ")));
    }
    if !keys.is_empty() {
        parts.push(format!("keys: {}", keys.join(", ")));
    }
    if parts.is_empty() {
        "any approver".to_owned()
    } else {
        parts.join("; ")
    }
}

/// The approve/deny controls of one pending approval (the script sends `step.approve`).
fn decision(execution_id: &str, step_id: &str) -> Markup {
    let reason_id = format!("reason-{step_id}");
    html! {
        form class="decision" data-decision data-execution-id=(execution_id) data-step-id=(step_id) {
            label for=(reason_id) { "Reason (optional)" }
            input id=(reason_id) type="text" name="reason";
            button type="submit" name="approved" value="true" class="approve" { "✔ Approve" }
            button type="submit" name="approved" value="false" class="deny" { "✖ Deny" }
        }
    }
}
