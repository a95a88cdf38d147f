//! Compiling a rule's `then.approval`: who may answer, how long an approval waits, and where it
//! escalates. Called from `compile.rs` for each rule that requires approval.

use std::sync::Arc;

use super::compile::duration_field;
use super::definition::{CompileIssue, FieldPath, RuleDefinition};
use crate::approvals::{ApprovalTerms, Approvers};
use crate::events::Escalation;
use crate::policy::engine::Decision;

/// Checks a rule's `then.approval` and turns it into the terms recorded on each approval.
pub(super) fn compile_approval(
    approval: &super::definition::ApprovalDefinition,
    rule: &RuleDefinition,
    path: &FieldPath,
    errors: &mut Vec<CompileIssue>,
) -> Option<Arc<ApprovalTerms>> {
    let name = rule.id.as_str();
    let before = errors.len();
    let mut issue = |keys: &[&str], message: String| {
        errors.push(CompileIssue::new(
            path.keys(keys),
            format!("rule `{name}`: {message}"),
        ));
    };
    if rule.then.decision != Decision::RequireApproval {
        issue(
            &["then", "approval"],
            "then.approval is only for decision: require_approval".to_owned(),
        );
    }
    check_approvers(&approval.roles, &approval.keys, "approvers", &mut issue);
    let escalates = approval.on_expiry.as_deref() == Some("escalate");
    if let Some(on_expiry) = &approval.on_expiry
        && on_expiry != "deny"
        && !escalates
    {
        issue(
            &["then", "approval", "on_expiry"],
            format!("then.approval.on_expiry must be deny or escalate, not {on_expiry:?}"),
        );
    }
    match (&approval.escalate_to, escalates) {
        (None, true) => issue(
            &["then", "approval", "escalate_to"],
            "then.approval.on_expiry: escalate needs then.approval.escalate_to".to_owned(),
        ),
        (Some(_), false) => issue(
            &["then", "approval", "escalate_to"],
            "then.approval.escalate_to is only for on_expiry: escalate".to_owned(),
        ),
        (Some(_), true) if approval.expires_in.is_none() => issue(
            &["then", "approval", "expires_in"],
            "then.approval.on_expiry: escalate needs then.approval.expires_in".to_owned(),
        ),
        _ => {}
    }
    if let Some(to) = &approval.escalate_to {
        check_approvers(&to.roles, &to.keys, "escalate_to", &mut issue);
        if to.roles.is_empty() && to.keys.is_empty() {
            issue(
                &["then", "approval", "escalate_to"],
                "then.approval.escalate_to names no roles and no keys".to_owned(),
            );
        }
        if to.expires_in.is_none() {
            issue(
                &["then", "approval", "escalate_to", "expires_in"],
                "then.approval.escalate_to.expires_in is required".to_owned(),
            );
        }
    }
    // `parse_duration` refuses zero and negative durations.
    let expires_after = approval.expires_in.as_ref().and_then(|text| {
        duration_field(
            text,
            path,
            &["then", "approval", "expires_in"],
            name,
            errors,
        )
    });
    let escalation = approval.escalate_to.as_ref().and_then(|to| {
        let after = duration_field(
            to.expires_in.as_deref()?,
            path,
            &["then", "approval", "escalate_to", "expires_in"],
            name,
            errors,
        )?;
        Some(Escalation {
            approvers: Approvers {
                roles: to.roles.clone(),
                keys: to.keys.clone(),
            },
            expires_in_ms: u64::try_from(after.as_millis()).unwrap_or(u64::MAX),
        })
    });
    if errors.len() > before {
        return None;
    }
    Some(Arc::new(ApprovalTerms {
        approvers: Approvers {
            roles: approval.roles.clone(),
            keys: approval.keys.clone(),
        },
        expires_after,
        self_approval: approval.self_approval,
        escalation,
    }))
}

/// Reports roles that do not answer approvals and empty key names of `approvers` or
/// `escalate_to`.
fn check_approvers(
    roles: &[String],
    keys: &[String],
    field: &str,
    issue: &mut impl FnMut(&[&str], String),
) {
    let (roles_path, keys_path) = match field {
        "approvers" => (["approvers", "roles"], ["approvers", "keys"]),
        _ => (["escalate_to", "roles"], ["escalate_to", "keys"]),
    };
    let label = if field == "approvers" {
        "approvers."
    } else {
        "escalate_to."
    };
    for role in roles {
        if !matches!(role.as_str(), "admin" | "operator" | "approver") {
            issue(
                &["then", "approval", roles_path[0], roles_path[1]],
                format!(
                    "then.approval.{label}roles: {role:?} does not answer approvals \
                     (admin, operator or approver)"
                ),
            );
        }
    }
    if keys.iter().any(|key| key.trim().is_empty()) {
        issue(
            &["then", "approval", keys_path[0], keys_path[1]],
            format!("then.approval.{label}keys: a key name must not be empty"),
        );
    }
}
