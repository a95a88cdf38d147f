//! The hook chain (docs/hooks.md): operator endpoints called at fixed points of a tool call
//! or a creation, configured with the policy. `pre_tool` runs after the policy allowed an
//! `invoke_tool` and before the step exists (pass, modify the arguments, or abort the intent);
//! `post_tool` runs when a step's result arrives, before the agent sees it (pass, modify the
//! result, or fail the step). Both run in order inside the execution actor, the execution's
//! single writer, so what they decide is recorded (`hook.decided`) in the same commit as its
//! effect. `pre_create` runs before an execution exists (pass, add labels, or refuse the
//! creation), in the creating request's task ([`creation`]); its decisions are committed with
//! `execution.created`.
//!
//! This module is the port: the hook definitions, the verdicts, and [`HookCaller`], which
//! `src/` implements with an HTTP client (each call bounded by the hook's timeout). A policy's
//! hooks travel beside its engine (`KernelConfig::hooks`, `Kernel::replace_policy`), not inside
//! it, so the engine seen by the policy actor is always the one that was loaded.

mod chain;
pub mod creation;

use std::time::Duration;

use crate::ids::AgentId;
use async_trait::async_trait;
use serde_json::Value;

pub use chain::{Applier, ChainOutcome, ChainRun, run_chain};

/// Where a hook runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HookPoint {
    /// After the policy allowed an `invoke_tool`, before the step exists.
    PreTool,
    /// When a step's result arrives, before the agent sees it.
    PostTool,
    /// Before an execution is created (it may refuse it or add labels).
    PreCreate,
}

impl HookPoint {
    /// Returns the policy file's and the event's name of the point.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PreTool => "pre_tool",
            Self::PostTool => "post_tool",
            Self::PreCreate => "pre_create",
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

/// What a `pre_tool` or `post_tool` hook's modify of a LOCAL tool's call means when the agent
/// cannot apply it (its SDK does not send `Keel-Capabilities: modify`, e.g. rebuno 0.4.8): the
/// agent runs the tool itself, so a modification it never sees must not pass for applied.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LocalModify {
    /// Refuse: the intent is denied (`pre_tool`) or the step fails (`post_tool`) with a reason
    /// that says why (the default: a hook used as a security control does not fail open).
    #[default]
    Refuse,
    /// Record the hook's decision only: the call goes on with what the agent has, and that is
    /// what the log records.
    RecordOnly,
}

impl LocalModify {
    /// Returns the policy file's name of the choice.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Refuse => "refuse",
            Self::RecordOnly => "record_only",
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
    pub agent_ids: Vec<AgentId>,
    /// Only tool calls these policy rules decided (empty: every rule; always empty for
    /// `pre_create`, which no rule decides).
    pub rule_ids: Vec<String>,
    /// What a modify of a local tool's call means when the agent cannot apply it.
    pub local_modify: LocalModify,
}

impl HookSpec {
    /// Returns whether the hook applies to a call of `agent_id` decided by `rule_id`.
    pub fn applies(&self, point: HookPoint, agent_id: &AgentId, rule_id: &str) -> bool {
        self.point == point
            && (self.agent_ids.is_empty() || self.agent_ids.iter().any(|id| id == agent_id))
            && (self.rule_ids.is_empty() || self.rule_ids.iter().any(|id| id == rule_id))
    }

    /// Returns whether the hook is a `pre_create` hook for executions of `agent_id`.
    pub fn applies_to_creation(&self, agent_id: &AgentId) -> bool {
        self.point == HookPoint::PreCreate
            && (self.agent_ids.is_empty() || self.agent_ids.iter().any(|id| id == agent_id))
    }
}

/// A hook's answer.
#[derive(Clone, Debug, PartialEq)]
pub enum HookVerdict {
    /// Go on unchanged.
    Pass,
    /// Go on with this value instead (arguments for `pre_tool`, result for `post_tool`); for
    /// `pre_create`, the labels to add (an object of string values, none already set).
    Modify(Value),
    /// Stop: deny the intent (`pre_tool`), fail the step (`post_tool`) or refuse the creation
    /// (`pre_create`) with this reason.
    Abort(String),
}

/// Calls hook endpoints. Implementations bound each call by `hook.timeout` and map every
/// failure (connection, timeout, non-2xx, a body that is not a verdict) to `Err(reason)`.
#[async_trait]
pub trait HookCaller: Send + Sync + 'static {
    /// POSTs `request` to `hook` and returns its verdict.
    async fn call(&self, hook: &HookSpec, request: &Value) -> Result<HookVerdict, String>;
}
