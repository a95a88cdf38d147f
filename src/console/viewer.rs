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

/// The principal of a console view and what it may do there.
#[derive(Clone, Debug)]
pub struct Viewer {
    /// Key name (`admin` for the bearer token, `anonymous` on an open kernel).
    pub name: String,
    pub role: Role,
    /// An API key (the bearer token and open kernels are not told apart by the approval
    /// checks, `crate::http::approvals::check_answerer`).
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

    /// Whether this viewer may answer an approval whose rule names `approvers` (its
    /// `approvers` field; absent: anyone whose role answers).
    pub fn may_answer(&self, approvers: Option<&Value>) -> bool {
        if !self.answers() {
            return false;
        }
        if !self.keyed {
            return true;
        }
        let named: Approvers = approvers
            .and_then(|value| serde_json::from_value(value.clone()).ok())
            .unwrap_or_default();
        named.admit(self.role.as_str(), &self.name)
    }
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
    fn an_approval_naming_its_approvers_is_offered_to_them_only() {
        let boss = json!({"keys": ["boss"]});
        assert!(viewer(Role::Approver, "boss").may_answer(Some(&boss)));
        assert!(!viewer(Role::Approver, "lead").may_answer(Some(&boss)));
        assert!(viewer(Role::Approver, "lead").may_answer(None));
        let operators = json!({"roles": ["operator"]});
        assert!(viewer(Role::Operator, "ops").may_answer(Some(&operators)));
        assert!(!viewer(Role::Approver, "alice").may_answer(Some(&operators)));
        assert!(!viewer(Role::Reader, "boss").may_answer(Some(&boss)));
        // The bearer token is not checked against the names (as the kernel does).
        assert!(Viewer::of(&Principal::bearer_token()).may_answer(Some(&boss)));
    }
}
