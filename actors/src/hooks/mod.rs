//! The hook chain (docs/hooks.md): operator endpoints called at fixed points of a tool call,
//! configured with the policy. `pre_tool` runs after the policy allowed an `invoke_tool` and
//! before the step exists (pass, modify the arguments, or abort the intent); `post_tool` runs
//! when a step's result arrives, before the agent sees it (pass, modify the result, or fail the
//! step). Hooks run in order inside the execution actor, the execution's single writer, so what
//! they decide is recorded (`hook.decided`) in the same commit as its effect.
//!
//! This module is the port: the hook definitions, the verdicts, and [`HookCaller`], which
//! `src/` implements with an HTTP client (each call bounded by the hook's timeout).

mod chain;

use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

pub use chain::{ChainOutcome, ChainRun, run_chain};

/// Where a hook runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HookPoint {
    /// After the policy allowed an `invoke_tool`, before the step exists.
    PreTool,
    /// When a step's result arrives, before the agent sees it.
    PostTool,
}

impl HookPoint {
    /// Returns the policy file's and the event's name of the point.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PreTool => "pre_tool",
            Self::PostTool => "post_tool",
        }
    }
}

/// What happens when a hook cannot be called or answers nonsense.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FailureMode {
    /// Treat the failure as an abort (the default).
    #[default]
    FailClosed,
    /// Treat the failure as a pass.
    FailOpen,
}

impl FailureMode {
    /// Returns the policy file's name of the mode.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::FailClosed => "fail_closed",
            Self::FailOpen => "fail_open",
        }
    }
}

/// One configured hook.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HookSpec {
    /// Unique id (recorded in `hook.decided`).
    pub id: String,
    /// Where it runs.
    pub point: HookPoint,
    /// Endpoint the call is POSTed to.
    pub url: String,
    /// Bound of one call.
    pub timeout: Duration,
    /// What a failed call means.
    pub failure: FailureMode,
    /// Only executions of these agents (empty: every agent).
    pub agent_ids: Vec<String>,
    /// Only tool calls these policy rules decided (empty: every rule).
    pub rule_ids: Vec<String>,
}

impl HookSpec {
    /// Returns whether the hook applies to a call of `agent_id` decided by `rule_id`.
    pub fn applies(&self, point: HookPoint, agent_id: &str, rule_id: &str) -> bool {
        self.point == point
            && (self.agent_ids.is_empty() || self.agent_ids.iter().any(|id| id == agent_id))
            && (self.rule_ids.is_empty() || self.rule_ids.iter().any(|id| id == rule_id))
    }
}

/// A hook's answer.
#[derive(Clone, Debug, PartialEq)]
pub enum HookVerdict {
    /// Go on unchanged.
    Pass,
    /// Go on with this value instead (arguments for `pre_tool`, result for `post_tool`).
    Modify(Value),
    /// Stop: deny the intent (`pre_tool`) or fail the step (`post_tool`) with this reason.
    Abort(String),
}

/// Calls hook endpoints. Implementations bound each call by `hook.timeout` and map every
/// failure (connection, timeout, non-2xx, a body that is not a verdict) to `Err(reason)`.
#[async_trait]
pub trait HookCaller: Send + Sync + 'static {
    /// POSTs `request` to `hook` and returns its verdict.
    async fn call(&self, hook: &HookSpec, request: &Value) -> Result<HookVerdict, String>;
}

/// A policy engine with hooks: decides as `inner` does and carries the policy's hooks, so
/// they are replaced with the policy on reload.
pub struct HookedEngine {
    /// The engine that decides.
    pub inner: std::sync::Arc<dyn crate::policy::PolicyEngine>,
    /// The hooks, in order.
    pub hooks: Vec<HookSpec>,
}

impl crate::policy::PolicyEngine for HookedEngine {
    fn evaluate(&self, input: &crate::policy::PolicyInput) -> crate::policy::PolicyDecision {
        self.inner.evaluate(input)
    }

    fn digest(&self) -> String {
        self.inner.digest()
    }

    fn longest_rate_window(&self) -> Option<Duration> {
        self.inner.longest_rate_window()
    }

    fn rule_ids(&self) -> Vec<String> {
        self.inner.rule_ids()
    }

    fn hooks(&self) -> &[HookSpec] {
        &self.hooks
    }

    fn agent_budget(
        &self,
        agent_id: &str,
    ) -> Option<std::sync::Arc<crate::guardrails::budget::Budget>> {
        self.inner.agent_budget(agent_id)
    }

    fn breakers(&self) -> &crate::guardrails::breaker::BreakerSet {
        self.inner.breakers()
    }

    fn max_running(&self, agent_id: &str) -> Option<u32> {
        self.inner.max_running(agent_id)
    }

    fn tool_limits(&self) -> &crate::guardrails::concurrency::ToolLimits {
        self.inner.tool_limits()
    }
}
