//! What operators see of the policy in force (`GET /v0/policy`, the console's health page):
//! its source, digest and rule ids, and the outcome of the last reload attempt. Set at startup
//! and updated by [`super::PolicyReloader`]; reading it never touches the policy actor.

use std::sync::{PoisonError, RwLock};

use keel_actors::policy::PolicyEngine;
use keel_actors::time::{self, Timestamp};
use serde::Serialize;

/// The policy in force and the last reload attempt; shared by the reloader and the HTTP layer.
#[derive(Debug)]
pub struct PolicyStatus {
    state: RwLock<PolicySnapshot>,
}

/// One consistent view of [`PolicyStatus`].
#[derive(Clone, Debug, Serialize)]
pub struct PolicySnapshot {
    /// `--policy` as given, or `None` when the built-in default is in force.
    pub source: Option<String>,
    /// Digest of the policy in force.
    pub digest: String,
    /// Ids of its rules.
    pub rules: Vec<String>,
    /// When the policy in force was installed.
    #[serde(with = "time::serde_micros")]
    pub loaded_at: Timestamp,
    /// The last reload attempt, if any.
    pub last_reload: Option<ReloadOutcome>,
}

/// Outcome of one reload attempt.
#[derive(Clone, Debug, Serialize)]
pub struct ReloadOutcome {
    /// When it ended.
    #[serde(with = "time::serde_micros")]
    pub at: Timestamp,
    /// `ok` (installed), `unchanged` (same digest) or `error` (the old policy stays).
    pub result: &'static str,
    /// The problems of a failed reload, one per line; empty otherwise.
    pub problems: Vec<String>,
}

impl PolicyStatus {
    /// Returns the status of `engine`, loaded from `source` just now.
    pub fn new(source: Option<String>, engine: &dyn PolicyEngine) -> Self {
        Self {
            state: RwLock::new(PolicySnapshot {
                source,
                digest: engine.digest(),
                rules: engine.rule_ids(),
                loaded_at: time::now(),
                last_reload: None,
            }),
        }
    }

    /// Returns the current view.
    pub fn snapshot(&self) -> PolicySnapshot {
        self.state
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Records that `engine` was installed by a reload.
    pub fn installed(&self, engine: &dyn PolicyEngine) {
        let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
        let now = time::now();
        state.digest = engine.digest();
        state.rules = engine.rule_ids();
        state.loaded_at = now;
        state.last_reload = Some(ReloadOutcome {
            at: now,
            result: "ok",
            problems: Vec::new(),
        });
    }

    /// Records a reload that found the policy unchanged.
    pub fn unchanged(&self) {
        self.record("unchanged", Vec::new());
    }

    /// Records a reload that failed with `problems`; the policy in force stays.
    pub fn refused(&self, problems: Vec<String>) {
        self.record("error", problems);
    }

    fn record(&self, result: &'static str, problems: Vec<String>) {
        let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
        state.last_reload = Some(ReloadOutcome {
            at: time::now(),
            result,
            problems,
        });
    }
}

#[cfg(test)]
mod tests {
    use keel_actors::policy::PermissiveEngine;

    use super::*;

    #[test]
    fn reload_outcomes_are_recorded_and_the_policy_in_force_kept_on_error() {
        let status = PolicyStatus::new(Some("p.yaml".to_owned()), &PermissiveEngine);
        let first = status.snapshot();
        assert_eq!(first.digest, PermissiveEngine.digest());
        assert!(first.last_reload.is_none());
        status.refused(vec!["p.yaml:3: unknown key".to_owned()]);
        let refused = status.snapshot();
        assert_eq!(refused.digest, first.digest);
        assert_eq!(refused.loaded_at, first.loaded_at);
        let outcome = refused.last_reload.expect("an outcome");
        assert_eq!(outcome.result, "error");
        assert_eq!(outcome.problems, vec!["p.yaml:3: unknown key".to_owned()]);
        status.unchanged();
        assert_eq!(
            status.snapshot().last_reload.map(|o| o.result),
            Some("unchanged")
        );
        status.installed(&PermissiveEngine);
        let installed = status.snapshot();
        assert_eq!(installed.last_reload.map(|o| o.result), Some("ok"));
        assert!(installed.loaded_at >= first.loaded_at);
    }
}
