//! The YAML shape of a rule's `then.approval` (docs/policy.md): who may answer the approval a
//! `require_approval` rule asks for, how long it waits and what expiry does (`deny`, or
//! `escalate` to the approvers of `escalate_to`). The compiler checks the values (roles that
//! answer approvals, positive durations, `on_expiry` with its `escalate_to`).

use keel_actors::policy::rules::{ApprovalDefinition, EscalationDefinition};
use serde::Deserialize;

/// `then.approval:`.
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "an `approval` mapping with any of `approvers`, `expires_in`, `on_expiry`, \
                 `escalate_to`, `self_approval`"
)]
pub struct ApprovalSpec {
    /// Who may answer; absent: any key whose role answers approvals.
    #[serde(default)]
    pub approvers: Option<ApproversSpec>,
    /// How long the approval waits (`30m`).
    #[serde(default)]
    pub expires_in: Option<String>,
    /// What expiry does: `deny` or `escalate`.
    #[serde(default)]
    pub on_expiry: Option<String>,
    /// Whom `on_expiry: escalate` asks next.
    #[serde(default)]
    pub escalate_to: Option<EscalateSpec>,
    /// Whether the key that created the execution may answer it (default false).
    #[serde(default)]
    pub self_approval: bool,
}

/// `then.approval.approvers:`.
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "an `approvers` mapping with `roles` and/or `keys`"
)]
pub struct ApproversSpec {
    /// Role names.
    #[serde(default)]
    pub roles: Vec<String>,
    /// Key names.
    #[serde(default)]
    pub keys: Vec<String>,
}

/// `then.approval.escalate_to:`.
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "an `escalate_to` mapping with `approvers` and `expires_in`"
)]
pub struct EscalateSpec {
    /// Who may answer the escalated approval.
    #[serde(default)]
    pub approvers: Option<ApproversSpec>,
    /// How long it waits before the call is denied.
    #[serde(default)]
    pub expires_in: Option<String>,
}

impl From<ApprovalSpec> for ApprovalDefinition {
    fn from(spec: ApprovalSpec) -> Self {
        let (roles, keys) = spec
            .approvers
            .map(|approvers| (approvers.roles, approvers.keys))
            .unwrap_or_default();
        Self {
            roles,
            keys,
            expires_in: spec.expires_in,
            on_expiry: spec.on_expiry,
            self_approval: spec.self_approval,
            escalate_to: spec.escalate_to.map(|to| {
                let (roles, keys) = to
                    .approvers
                    .map(|approvers| (approvers.roles, approvers.keys))
                    .unwrap_or_default();
                EscalationDefinition {
                    roles,
                    keys,
                    expires_in: to.expires_in,
                }
            }),
        }
    }
}
