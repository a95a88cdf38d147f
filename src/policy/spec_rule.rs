//! The YAML shape of one rule and of a file's `default`: `when` (the conditions), `then` (the
//! decision, rate limit, retry, idempotency and approval), each converting into the rule
//! definitions of `keel_actors::policy::rules`. The file shell and the other sections are in
//! `spec.rs`.

use std::collections::BTreeMap;

use serde::Deserialize;

use keel_actors::policy::Decision;
use keel_actors::policy::rules::{
    ConditionDefinition, DefaultDefinition, OutcomeDefinition, RateLimitDefinition,
    RetryDefinition, RuleDefinition,
};

use super::spec::BudgetSpec;
use super::spec_arguments::ArgumentsSpec;

/// `default:` — the decision when no rule matches.
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a `default` mapping with `decision` and an optional `reason`"
)]
pub struct DefaultSpec {
    /// `allow`, `deny` or `require_approval`.
    pub decision: DecisionSpec,
    /// Reason reported with it.
    #[serde(default)]
    pub reason: Option<String>,
}

/// A decision as YAML spells it.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecisionSpec {
    /// Run the tool.
    Allow,
    /// Refuse the call.
    Deny,
    /// Hold the step for a human.
    RequireApproval,
}

/// One entry of `rules:`.
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a rule mapping with `id`, `priority`, `when`, `then`"
)]
pub struct RuleSpec {
    /// Unique rule id.
    pub id: String,
    /// Unique evaluation order, ascending.
    pub priority: i64,
    /// Free text.
    #[serde(default)]
    pub description: Option<String>,
    /// Conditions; `{}` matches every call.
    pub when: WhenSpec,
    /// Outcome.
    pub then: ThenSpec,
    /// Sliding-window limit after an allow.
    #[serde(default)]
    pub rate_limit: Option<RateLimitSpec>,
    /// Retry settings.
    #[serde(default)]
    pub retry: Option<RetrySpec>,
    /// Budget limits for the calls this rule allows (Keel addition).
    #[serde(default)]
    pub budget: Option<BudgetSpec>,
}

/// `when:` of a rule.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a `when` mapping of conditions")]
pub struct WhenSpec {
    /// Exact action (`tool.invoke`).
    #[serde(default)]
    pub action: Option<String>,
    /// Tool-id glob.
    #[serde(default)]
    pub tool_id: Option<String>,
    /// Tool-id globs, any of which may match.
    #[serde(default)]
    pub tool_ids: Option<Vec<String>>,
    /// Exact agent id.
    #[serde(default)]
    pub agent_id: Option<String>,
    /// Agent ids, any of which may match.
    #[serde(default)]
    pub agent_ids: Option<Vec<String>>,
    /// Labels that must all be equal.
    #[serde(default)]
    pub labels: Option<BTreeMap<String, String>>,
    /// Predicates on top-level argument fields (sequence form, or Keel's mapping shorthand).
    #[serde(default)]
    pub arguments: Option<ArgumentsSpec>,
    /// `step_count >= n`.
    #[serde(default)]
    pub min_step_count: Option<i64>,
    /// `duration_ms >= n`.
    #[serde(default)]
    pub min_duration_ms: Option<i64>,
    /// `<days> <HH:MM>-<HH:MM> <IANA zone>`.
    #[serde(default)]
    pub schedule: Option<String>,
    /// Glob the creating key's name must match.
    #[serde(default)]
    pub created_by: Option<String>,
    /// Glob the execution's `on_behalf_of` must match.
    #[serde(default)]
    pub on_behalf_of: Option<String>,
}

/// `then:` of a rule.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a `then` mapping with `decision`")]
pub struct ThenSpec {
    /// What to do.
    pub decision: DecisionSpec,
    /// Reason reported.
    #[serde(default)]
    pub reason: Option<String>,
    /// Step deadline in milliseconds; 0 means the kernel's step timeout.
    #[serde(default)]
    pub timeout_ms: Option<i64>,
    /// Whether a re-run answers a matching call from the journal (default true); `false` for
    /// calls that must run again (reading the clock, polling a status). Keel addition.
    #[serde(default)]
    pub replay: Option<bool>,
    /// `at_most_once`: a remote step that loses its runner after delivery is not retried; its
    /// outcome is unknown until an operator reconciles it. `at_least_once` (the default)
    /// retries it. Keel addition (the word rebuno uses).
    #[serde(default)]
    pub idempotency: Option<IdempotencySpec>,
    /// Who may answer a `require_approval`, and its expiry. Keel addition.
    #[serde(default)]
    pub approval: Option<super::spec_approval::ApprovalSpec>,
}

/// `then.idempotency` of a rule.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum IdempotencySpec {
    /// Retried after a lost runner (the default).
    AtLeastOnce,
    /// Never run twice without an operator's answer.
    AtMostOnce,
}

/// `rate_limit:` of a rule.
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a `rate_limit` mapping with `max` and `window`"
)]
pub struct RateLimitSpec {
    /// Allowed calls per window.
    pub max: i64,
    /// Window, a Go duration (`1m`, `1m30s`, `1.5h`).
    pub window: String,
}

/// `retry:` of a rule.
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a `retry` mapping with `max_attempts`, `base_delay`, `max_delay`"
)]
pub struct RetrySpec {
    /// Attempts in total.
    pub max_attempts: i64,
    /// First delay.
    pub base_delay: String,
    /// Largest delay.
    pub max_delay: String,
}

impl From<DecisionSpec> for Decision {
    fn from(spec: DecisionSpec) -> Self {
        match spec {
            DecisionSpec::Allow => Self::Allow,
            DecisionSpec::Deny => Self::Deny,
            DecisionSpec::RequireApproval => Self::RequireApproval,
        }
    }
}

impl From<DefaultSpec> for DefaultDefinition {
    fn from(spec: DefaultSpec) -> Self {
        Self {
            decision: spec.decision.into(),
            reason: spec.reason,
        }
    }
}

impl From<RuleSpec> for RuleDefinition {
    fn from(spec: RuleSpec) -> Self {
        let when = spec.when;
        Self {
            id: spec.id,
            priority: spec.priority,
            description: spec.description,
            when: ConditionDefinition {
                action: when.action,
                tool_id: when.tool_id,
                tool_ids: when.tool_ids,
                agent_id: when.agent_id,
                agent_ids: when.agent_ids,
                labels: when.labels,
                arguments: when.arguments.map(Into::into),
                min_step_count: when.min_step_count,
                min_duration_ms: when.min_duration_ms,
                schedule: when.schedule,
                created_by: when.created_by,
                on_behalf_of: when.on_behalf_of,
            },
            then: OutcomeDefinition {
                decision: spec.then.decision.into(),
                reason: spec.then.reason,
                timeout_ms: spec.then.timeout_ms,
                replay: spec.then.replay,
                at_most_once: spec.then.idempotency == Some(IdempotencySpec::AtMostOnce),
                approval: spec.then.approval.map(Into::into),
            },
            rate_limit: spec.rate_limit.map(|limit| RateLimitDefinition {
                max: limit.max,
                window: limit.window,
            }),
            retry: spec.retry.map(|retry| RetryDefinition {
                max_attempts: retry.max_attempts,
                base_delay: retry.base_delay,
                max_delay: retry.max_delay,
            }),
            budget: spec.budget.map(Into::into),
        }
    }
}
