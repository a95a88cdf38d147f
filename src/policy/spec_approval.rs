//! The YAML shape of a rule's `then.approval` (docs/policy.md): who may answer the approval a
//! `require_approval` rule asks for, how long it waits and what expiry does. The compiler
//! checks the values (roles that answer approvals, a positive duration, `on_expiry: deny`).

use keel_actors::policy::rules::ApprovalDefinition;
use serde::Deserialize;

/// `then.approval:`.
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "an `approval` mapping with any of `approvers`, `expires_in`, `on_expiry`, \
                 `self_approval`"
)]
pub struct ApprovalSpec {
    /// Who may answer; absent: any key whose role answers approvals.
    #[serde(default)]
    pub approvers: Option<ApproversSpec>,
    /// How long the approval waits (`30m`).
    #[serde(default)]
    pub expires_in: Option<String>,
    /// What expiry does: `deny`.
    #[serde(default)]
    pub on_expiry: Option<String>,
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
        }
    }
}
