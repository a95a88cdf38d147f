//! Who is looking at the console, and which actions the pages offer them (docs/console.md,
//! "Roles"). The kernel refuses every action a role may not take (`crate::auth::role`); the
//! views only leave out what would be refused, from the same route table.

use std::convert::Infallible;

use axum::extract::FromRequestParts;
use axum::http::Method;
use axum::http::request::Parts;
use keel_actors::approvals::Approvers;
use serde_json::Value;

use crate::auth::role;
use crate::auth::{Principal, Role};
use crate::http::approvals::{Refusal, refusal};

/// The principal of a console view and what it may do there.
#[derive(Clone, Debug)]
pub struct Viewer {
    /// Key name (`admin` for the bearer token, `anonymous` on an open kernel).
    pub name: String,
    pub role: Role,
    /// An API key (the bearer token and open kernels are not told apart by the approval
    /// checks, [`crate::http::approvals::refusal`]).
    keyed: bool,
}

impl Viewer {
    /// The viewer acting as `principal`.
    pub fn of(principal: &Principal) -> Self {
        Self {
            name: principal.name.to_string(),
            role: principal.role,
            keyed: principal.revoked.is_some(),
        }
    }

    fn allowed(&self, method: &Method, route: &str) -> bool {
        role::refusal(role::access(method, route), self.role).is_none()
    }

    /// Cancel, send signals, reconcile a step and run an execution again.
    pub fn operates(&self) -> bool {
        self.allowed(&Method::POST, "/v0/executions/{id}/cancel")
            && self.allowed(&Method::POST, "/v0/executions")
    }

    /// Approve and deny (the approvals API and the `step.approve` signal).
    pub fn answers(&self) -> bool {
        self.allowed(&Method::POST, "/v0/approvals/{id}")
    }

    /// What this viewer is offered for an approval whose rule names `approvers` (its
    /// `approvers` field; absent: anyone whose role answers) and allows self-approval or not,
    /// of an execution `creator` created: the kernel's own check
    /// ([`crate::http::approvals::refusal`]).
    pub fn offer(
        &self,
        approvers: Option<&Value>,
        self_approval: bool,
        creator: Option<&str>,
    ) -> Offer {
        if !self.answers() {
            return Offer::ReadOnly;
        }
        let named: Approvers = approvers
            .and_then(|value| serde_json::from_value(value.clone()).ok())
            .unwrap_or_default();
        let refused = refusal(
            self.keyed,
            self.role,
            &self.name,
            &named,
            self_approval,
            creator,
        );
        refused.map_or(Offer::Decide, Offer::Refused)
    }
}

/// What the console offers a viewer for one pending approval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Offer {
    /// Approve and deny.
    Decide,
    /// Nothing: the kernel would refuse this key's answer, for this reason.
    Refused(Refusal),
    /// Nothing: the key's role does not answer approvals.
    ReadOnly,
}

impl<S: Send + Sync> FromRequestParts<S> for Viewer {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let principal = parts
            .extensions
            .get::<Principal>()
            .cloned()
            .unwrap_or_else(Principal::anonymous);
        Ok(Self::of(&principal))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn viewer(role: Role, name: &str) -> Viewer {
        Viewer {
            name: name.to_owned(),
            role,
            keyed: true,
        }
    }

    #[test]
    fn each_role_is_offered_what_the_route_table_allows() {
        let offered = |role| {
            let viewer = viewer(role, "k");
            (viewer.operates(), viewer.answers())
        };
        assert_eq!(offered(Role::Admin), (true, true));
        assert_eq!(offered(Role::Operator), (true, true));
        assert_eq!(offered(Role::Approver), (false, true));
        assert_eq!(offered(Role::Reader), (false, false));
        assert_eq!(offered(Role::Agent), (false, false));
        assert_eq!(offered(Role::Runner), (false, false));
    }

    #[test]
    fn an_approval_is_offered_to_the_keys_the_kernel_would_accept() {
        let boss = json!({"keys": ["boss"]});
        let offer =
            |viewer: Viewer, approvers: Option<&Value>| viewer.offer(approvers, false, None);
        assert_eq!(
            offer(viewer(Role::Approver, "boss"), Some(&boss)),
            Offer::Decide
        );
        let not_named = Offer::Refused(Refusal::NotAnApprover);
        assert_eq!(
            offer(viewer(Role::Approver, "lead"), Some(&boss)),
            not_named
        );
        assert_eq!(offer(viewer(Role::Approver, "lead"), None), Offer::Decide);
        let operators = json!({"roles": ["operator"]});
        assert_eq!(
            offer(viewer(Role::Operator, "ops"), Some(&operators)),
            Offer::Decide
        );
        assert_eq!(
            offer(viewer(Role::Approver, "alice"), Some(&operators)),
            not_named
        );
        assert_eq!(
            offer(viewer(Role::Reader, "boss"), Some(&boss)),
            Offer::ReadOnly
        );
        // The bearer token is not checked against the names (as the kernel does).
        assert_eq!(
            offer(Viewer::of(&Principal::bearer_token()), Some(&boss)),
            Offer::Decide
        );
        // The key that created the execution, unless the rule allows self-approval.
        let ops = viewer(Role::Operator, "ops");
        let own = Offer::Refused(Refusal::OwnExecution);
        assert_eq!(ops.offer(None, false, Some("ops")), own);
        assert_eq!(ops.offer(None, true, Some("ops")), Offer::Decide);
        assert_eq!(ops.offer(None, false, Some("alice")), Offer::Decide);
    }
}
