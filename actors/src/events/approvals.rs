//! The payloads of `approval.requested` and `approval.resolved`: an approval as an object on the
//! feed and webhooks (docs/events.md), for chat and ticket systems to act on. Both are Keel
//! additions written beside the rebuno events (`step.approval_required`, `signal.received`),
//! which stay as they were.

use serde::{Deserialize, Serialize};

use crate::approvals::Approvers;
use crate::ids::ToolId;
use crate::time::{self, Timestamp};

/// `approval.requested`: an approval waits for an answer (again, with other approvers, when
/// `escalated`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRequest {
    /// `<execution id>.<step id>`, the id `POST /v0/approvals/{id}` takes.
    pub approval_id: String,
    /// Tool of the call.
    pub tool_id: ToolId,
    /// `sha256:` of the call's arguments (canonical JSON).
    pub arguments_digest: String,
    /// Rule that asked.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub rule_id: String,
    /// The rule's reason.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Who may answer (absent: any key whose role answers approvals).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approvers: Option<Approvers>,
    /// When it expires.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "time::serde_micros_opt"
    )]
    pub expires_at: Option<Timestamp>,
    /// What expiry does: `deny` or `escalate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_expiry: Option<String>,
    /// What an `escalate` expiry asks next (the rule's `approval.escalation`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalation: Option<Escalation>,
    /// Whether the key that created the execution may answer.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub self_approval: bool,
    /// Whether this request is the escalation of an expired one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub escalated: bool,
}

/// An escalation's terms: the approvers asked once the first ones let the approval expire,
/// and how long they have (then the call is denied).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Escalation {
    /// Who may answer the escalated approval.
    pub approvers: Approvers,
    /// How long the escalated approval waits, in milliseconds.
    pub expires_in_ms: u64,
}

/// `approval.resolved`: an approval was answered, or expired.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApprovalResolution {
    /// `<execution id>.<step id>`.
    pub approval_id: String,
    /// `approved`, `denied` or `expired` (expiry denies the call).
    pub decision: String,
    /// Who answered: the key name, `admin` for the bearer token, `system` for an expiry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approver: Option<String>,
    /// The answer's reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}
