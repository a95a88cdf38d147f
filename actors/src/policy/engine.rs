//! The interface every policy engine implements, and the two built-in engines: permissive
//! (`keel dev` without `--policy`) and secure default (`keel serve` without `--policy`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

pub use super::denial::DenialKind;
use crate::guardrails::breaker::BreakerSet;
use crate::guardrails::budget::{Budget, BudgetUsage};
use crate::guardrails::concurrency::{LabelLimit, ToolLimits};
use crate::ids::{AgentId, ExecutionId, ToolId};

/// The breakers of an engine without any.
static NO_BREAKERS: BreakerSet = BreakerSet(Vec::new());
/// The tool limits of an engine without any.
static NO_TOOL_LIMITS: ToolLimits = ToolLimits(Vec::new());
use crate::time::Timestamp;

/// What a policy decides about one tool call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Run the tool.
    Allow,
    /// Refuse the call.
    Deny,
    /// Hold the step until an operator approves it.
    RequireApproval,
}

impl Decision {
    /// Returns the YAML and metrics name of the decision.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Deny => "deny",
            Self::RequireApproval => "require_approval",
        }
    }
}

/// A sliding-window limit on allowed calls per `(agent_id, tool_id)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RateLimit {
    /// Calls allowed within one window.
    pub max: u32,
    /// Window length.
    pub window: Duration,
    /// The window as the policy file wrote it, for messages (`1m`, `1h30m`).
    pub window_text: String,
}

/// Retry settings a rule may give the tools it matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetrySettings {
    /// Attempts in total, including the first.
    pub max_attempts: u32,
    /// Delay before the second attempt.
    pub base_delay: Duration,
    /// Upper bound of any delay.
    pub max_delay: Duration,
}

/// Everything a policy may look at for one `invoke_tool` intent (WIRE.md §14.1).
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyInput {
    /// Always `tool.invoke` today.
    pub action: String,
    /// Agent of the execution.
    pub agent_id: AgentId,
    /// Tool asked for.
    pub tool_id: ToolId,
    /// Execution asking.
    pub execution_id: ExecutionId,
    /// Labels of the execution.
    pub labels: BTreeMap<String, String>,
    /// Arguments of the call (any JSON).
    pub arguments: Value,
    /// Steps the execution has had so far.
    pub step_count: u64,
    /// Milliseconds since the execution was created.
    pub duration_ms: u64,
    /// What the execution used of its budget so far (checked against the decision's budget).
    pub usage: BudgetUsage,
    /// Evaluation time (schedules are checked against it).
    pub now: Timestamp,
    /// Principal that created the execution (API key name, `admin` for the bearer token;
    /// `None` on kernels without authentication).
    pub created_by: Option<String>,
    /// End user the execution was created for, as its creator said.
    pub on_behalf_of: Option<String>,
}

/// The verdict of an engine for one input.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyDecision {
    /// What to do.
    pub decision: Decision,
    /// Rule that decided (`default`, `permissive-default`, ...).
    pub rule_id: String,
    /// Human-readable reason.
    pub reason: String,
    /// What made a `Deny` ([`DenialKind::Rule`] for the engine's own decisions); read it with
    /// [`PolicyDecision::denial`].
    pub denied_by: DenialKind,
    /// Per-rule step deadline in milliseconds.
    pub timeout_ms: Option<u64>,
    /// Rate limit of the matching rule, checked after an allow.
    pub rate_limit: Option<RateLimit>,
    /// Retry settings of the matching rule.
    pub retry: Option<RetrySettings>,
    /// Execution budget in force for this call (the file's, tightened by the rule's), checked
    /// by the policy actor after an allow or a require_approval.
    pub budget: Option<Arc<Budget>>,
    /// The rate-limit slot the policy actor gave this call (an allow under a rate limit): a
    /// call that does not go ahead after all (a `pre_tool` hook aborted it, or the policy
    /// refused its modified arguments) gives it back with `PolicyMsg::ReleaseRateSlot`.
    pub rate_slot: Option<RateSlot>,
    /// `concurrency.tools` limit of the tool, set by the policy actor on an allow: a local
    /// call is denied when this many local steps of the tool are running (the execution counts
    /// them in the store; remote jobs wait in the dispatcher instead).
    pub max_concurrent_steps: Option<u32>,
    /// Whether a re-run answers a call the journal holds instead of running it again (the
    /// rule's `replay`, true by default; docs/failure-semantics.md).
    pub replay: bool,
    /// Whether the rule says `idempotency: at_most_once` (docs/failure-semantics.md).
    pub at_most_once: bool,
    /// The terms of the approval a `require_approval` rule asks for (who, until when).
    pub approval: Option<Arc<crate::approvals::ApprovalTerms>>,
}

/// One admitted call in the rate-limit windows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RateSlot {
    /// Agent of the call.
    pub agent_id: AgentId,
    /// Tool of the call.
    pub tool_id: ToolId,
    /// When it was admitted (the windows' clock).
    pub at: tokio::time::Instant,
}

impl PolicyDecision {
    /// Returns a decision with no timeout, rate limit or retry settings.
    pub fn plain(decision: Decision, rule_id: &str, reason: &str) -> Self {
        Self {
            decision,
            rule_id: rule_id.to_owned(),
            reason: reason.to_owned(),
            denied_by: DenialKind::Rule,
            timeout_ms: None,
            rate_limit: None,
            retry: None,
            budget: None,
            rate_slot: None,
            max_concurrent_steps: None,
            replay: true,
            at_most_once: false,
            approval: None,
        }
    }

    /// Turns the decision into a denial of `kind` with `reason`.
    pub fn deny(&mut self, kind: DenialKind, reason: String) {
        self.decision = Decision::Deny;
        self.denied_by = kind;
        self.reason = reason;
    }

    /// Returns what denied the call, or `None` when it was not denied.
    pub fn denial(&self) -> Option<DenialKind> {
        (self.decision == Decision::Deny).then_some(self.denied_by)
    }

    /// Returns the text of a denial as the agent receives it.
    pub fn denial_text(&self) -> String {
        self.denied_by.agent_text(&self.reason, &self.rule_id)
    }
}

/// A loaded, immutable policy. Implementations must be cheap to evaluate and never panic.
pub trait PolicyEngine: Send + Sync + 'static {
    /// Decides about one tool call.
    fn evaluate(&self, input: &PolicyInput) -> PolicyDecision;

    /// Decides about a call of `input.tool_id` whatever its arguments (which tools an MCP
    /// client of `/v0/executions/{id}/mcp` is shown): rules that look at the arguments are
    /// passed over. An engine that cannot tell evaluates `input` as it is.
    fn evaluate_any_arguments(&self, input: &PolicyInput) -> PolicyDecision {
        self.evaluate(input)
    }

    /// Returns a short digest identifying the loaded policy (logged on reload).
    fn digest(&self) -> String;

    /// Returns the longest `rate_limit` window any rule uses, or `None` without rate limits.
    /// The policy actor rebuilds this much history from the store at startup (and when a
    /// reload makes the window longer), so that counters survive a restart; an engine that
    /// answers `None` while returning rate limits still has them enforced, only not rebuilt.
    fn longest_rate_window(&self) -> Option<Duration> {
        None
    }

    /// Returns the ids of the rules in force (each once, in evaluation order where the policy
    /// has one order), for operators (`GET /v0/policy`, the console's health page).
    fn rule_ids(&self) -> Vec<String> {
        Vec::new()
    }

    /// Returns the budget every execution of `agent_id` has (its policy file's, or the global
    /// one), shown on `GET /v0/executions/{id}`; rules may tighten it for the calls they match.
    /// Whether a policy file of its own names `agent_id` (directory mode).
    fn names_agent(&self, _agent_id: &AgentId) -> bool {
        false
    }

    fn agent_budget(&self, _agent_id: &AgentId) -> Option<Arc<Budget>> {
        None
    }

    /// Why `agent_id` may not call `model_id` (`provider/model`) through the LLM gateway, when
    /// a `models.allow` list refuses it.
    fn model_refusal(&self, _agent_id: &AgentId, _model_id: &str) -> Option<String> {
        None
    }

    /// Returns the kernel-wide circuit breakers per tool id.
    fn breakers(&self) -> &BreakerSet {
        &NO_BREAKERS
    }

    /// Returns the most executions of `agent_id` that may run at once (`concurrency.max_running`
    /// of its policy file, or the global one); `None` is unlimited.
    fn max_running(&self, _agent_id: &AgentId) -> Option<u32> {
        None
    }

    /// Returns the limits per label value of `agent_id`'s running executions
    /// (`concurrency.labels` of its policy file, or the global one); empty is none.
    fn label_limits(&self, _agent_id: &AgentId) -> Vec<LabelLimit> {
        Vec::new()
    }

    /// Returns the kernel-wide `max_concurrent_steps` per tool id (remote jobs wait, local calls are denied).
    fn tool_limits(&self) -> &ToolLimits {
        &NO_TOOL_LIMITS
    }
}

/// Allows every tool call (`keel dev` without `--policy`).
#[derive(Clone, Copy, Debug, Default)]
pub struct PermissiveEngine;

impl PolicyEngine for PermissiveEngine {
    fn evaluate(&self, _input: &PolicyInput) -> PolicyDecision {
        PolicyDecision::plain(
            Decision::Allow,
            "permissive-default",
            "permissive policy allows every tool",
        )
    }

    fn digest(&self) -> String {
        "permissive".to_owned()
    }
}

/// Denies every tool call (`keel serve` without `--policy`): the secure default.
#[derive(Clone, Copy, Debug, Default)]
pub struct SecureDefaultEngine;

impl PolicyEngine for SecureDefaultEngine {
    fn evaluate(&self, _input: &PolicyInput) -> PolicyDecision {
        PolicyDecision::plain(
            Decision::Deny,
            "secure-default",
            "No policy engine configured",
        )
    }

    fn digest(&self) -> String {
        "secure-default".to_owned()
    }
}
