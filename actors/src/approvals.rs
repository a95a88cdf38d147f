//! What an approval is bound to and who may answer it: the digest of the call's exact
//! arguments (a retry with other arguments is a new step whose digest differs, so it asks
//! again), and the rule's terms — approvers, expiry, self-approval (docs/policy.md).

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Who may answer an approval: any of these roles, or any of these key names. Both empty: any
/// key whose role answers approvals.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Approvers {
    /// Role names (`admin`, `operator`, `approver`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<String>,
    /// Key names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<String>,
}

impl Approvers {
    /// Whether nobody is named (any key that answers approvals may).
    pub fn is_empty(&self) -> bool {
        self.roles.is_empty() && self.keys.is_empty()
    }

    /// Whether a key of this name and role may answer.
    pub fn admit(&self, role: &str, key: &str) -> bool {
        self.is_empty()
            || self.roles.iter().any(|named| named == role)
            || self.keys.iter().any(|named| named == key)
    }
}

/// A `require_approval` rule's terms, recorded on `step.approval_required`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApprovalTerms {
    /// Who may answer.
    pub approvers: Approvers,
    /// How long the approval may wait; past it the call is denied (`on_expiry: deny`) or the
    /// approval escalated.
    pub expires_after: Option<Duration>,
    /// Whether the key that created the execution may answer.
    pub self_approval: bool,
    /// Whom an expired approval is asked of next (`on_expiry: escalate`); `None`: expiry denies.
    pub escalation: Option<crate::events::Escalation>,
}

impl ApprovalTerms {
    /// What expiry does, as recorded: `deny`, `escalate`, or `None` when it never expires.
    pub fn on_expiry(&self) -> Option<String> {
        self.expires_after.map(|_| {
            if self.escalation.is_some() {
                "escalate".to_owned()
            } else {
                "deny".to_owned()
            }
        })
    }
}

/// Returns `sha256:<hex>` of the arguments' canonical JSON (object keys sorted, no spaces):
/// equal arguments give equal digests whatever the order their keys were sent in.
pub fn arguments_digest(arguments: &Value) -> String {
    let mut hasher = Sha256::new();
    // serde_json's map is ordered by key (no `preserve_order`), so this is canonical.
    hasher.update(arguments.to_string().as_bytes());
    format!("sha256:{}", hex::encode(hasher.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_digest_is_of_the_arguments_not_of_their_spelling() {
        let parsed: Value =
            serde_json::from_str(r#"{"b": 2, "a": {"y": 1, "x": [1, 2]}}"#).expect("json");
        let same = json!({"a": {"x": [1, 2], "y": 1}, "b": 2});
        assert_eq!(arguments_digest(&parsed), arguments_digest(&same));
        let other = json!({"a": {"x": [2, 1], "y": 1}, "b": 2});
        assert_ne!(arguments_digest(&parsed), arguments_digest(&other));
        // Known value: the SHA-256 of `null`.
        assert_eq!(
            arguments_digest(&Value::Null),
            "sha256:74234e98afe7498fb5daf1f36ac2d78acc339464f950703b8c019892f982b90b"
        );
    }
}
