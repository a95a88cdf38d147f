//! The YAML shape of a policy file, as serde structs that reject unknown keys and wrong types.
//! Each converts into the plain definitions of `keel_actors::policy::rules`, whose compiler
//! then checks meaning (regexes, globs, schedules, durations, uniqueness).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde::de::IgnoredAny;

use keel_actors::policy::Decision;
use keel_actors::policy::rules::{
    BreakerDefinition, BudgetDefinition, ConcurrencyDefinition, ConditionDefinition,
    DefaultDefinition, LabelLimitDefinition, OutcomeDefinition, RateLimitDefinition,
    RetryDefinition, RuleDefinition, ToolLimitDefinition,
};

use super::spec_arguments::ArgumentsSpec;

/// The top level of a file with each rule left unparsed, so that one bad rule does not hide
/// problems in the others (each rule is parsed on its own).
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with `rules` and an optional `default`"
)]
pub struct FileShellSpec {
    /// The rules, parsed one by one afterwards.
    #[allow(dead_code, reason = "only its shape (a sequence) is checked here")]
    pub rules: Vec<IgnoredAny>,
    /// What applies when no rule matches.
    #[serde(default)]
    pub default: Option<DefaultSpec>,
    /// The hook chain (Keel addition, parsed by `hooks.rs`).
    #[allow(dead_code, reason = "parsed on its own by hooks.rs")]
    #[serde(default)]
    pub hooks: Option<IgnoredAny>,
    /// Budget of every execution the file applies to (Keel addition).
    #[serde(default)]
    pub budget: Option<BudgetSpec>,
    /// Circuit breakers per tool id (Keel addition).
    #[serde(default)]
    pub circuit_breakers: Option<Vec<BreakerSpec>>,
    /// Concurrency limits (Keel addition).
    #[serde(default)]
    pub concurrency: Option<ConcurrencySpec>,
    /// Models the LLM gateway may call for these agents (Keel addition, parsed by
    /// `load::parse_models`).
    #[allow(dead_code, reason = "parsed on its own by load::parse_models")]
    #[serde(default)]
    pub models: Option<IgnoredAny>,
}

/// `models:` — the LLM gateway's model allow-list (docs/llm.md).
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a `models` mapping with `allow`: a list of provider/model globs"
)]
pub struct ModelsSpec {
    /// Globs over `provider/model`.
    pub allow: Vec<String>,
}

/// The part of a file `load::parse_models` reads.
#[derive(Debug, Deserialize)]
pub struct ModelsShellSpec {
    /// The `models:` section, if any.
    #[serde(default)]
    pub models: Option<ModelsSpec>,
}

/// `concurrency:` — running executions per agent id (and per label value), steps per tool id.
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a `concurrency` mapping with any of `max_running`, `labels`, `tools`"
)]
pub struct ConcurrencySpec {
    /// Most running executions per agent id.
    #[serde(default)]
    pub max_running: Option<i64>,
    /// Limits per tool id.
    #[serde(default)]
    pub tools: Option<Vec<ToolLimitSpec>>,
    /// Limits per label value.
    #[serde(default)]
    pub labels: Option<Vec<LabelLimitSpec>>,
}

/// One entry of `concurrency.labels:`.
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a label limit mapping with `label` and `max_running`"
)]
pub struct LabelLimitSpec {
    /// Label key whose values are limited.
    pub label: String,
    /// Most running executions of the agent per value of the label.
    pub max_running: i64,
}

/// One entry of `concurrency.tools:`.
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a tool limit mapping with `tool_id` or `tool_ids` and `max_concurrent_steps`"
)]
pub struct ToolLimitSpec {
    /// Tool-id glob.
    #[serde(default)]
    pub tool_id: Option<String>,
    /// Tool-id globs.
    #[serde(default)]
    pub tool_ids: Option<Vec<String>>,
    /// Most steps of one tool id in runners' hands at once.
    pub max_concurrent_steps: i64,
}

impl From<ConcurrencySpec> for ConcurrencyDefinition {
    fn from(spec: ConcurrencySpec) -> Self {
        Self {
            max_running: spec.max_running,
            tools: spec.tools.map(|tools| {
                tools
                    .into_iter()
                    .map(|tool| ToolLimitDefinition {
                        tool_id: tool.tool_id,
                        tool_ids: tool.tool_ids,
                        max_concurrent_steps: tool.max_concurrent_steps,
                    })
                    .collect()
            }),
            labels: spec.labels.map(|labels| {
                labels
                    .into_iter()
                    .map(|entry| LabelLimitDefinition {
                        label: entry.label,
                        max_running: entry.max_running,
                    })
                    .collect()
            }),
        }
    }
}

/// One entry of `circuit_breakers:`.
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a circuit breaker mapping with `tool_id`/`tool_ids` or `runner_id`/`runner_ids`, `failures` or \
                 `failure_rate` (and `min_calls`), `cool_down` and an optional `window`"
)]
pub struct BreakerSpec {
    /// Tool-id glob.
    #[serde(default)]
    pub tool_id: Option<String>,
    /// Tool-id globs.
    #[serde(default)]
    pub tool_ids: Option<Vec<String>>,
    /// Runner-id glob (a runner breaker).
    #[serde(default)]
    pub runner_id: Option<String>,
    /// Runner-id globs.
    #[serde(default)]
    pub runner_ids: Option<Vec<String>>,
    /// Failures within the window that open it.
    #[serde(default)]
    pub failures: Option<i64>,
    /// Share of failed results within the window that opens it.
    #[serde(default)]
    pub failure_rate: Option<f64>,
    /// Fewest results before the failure rate counts.
    #[serde(default)]
    pub min_calls: Option<i64>,
    /// Window of the failures (default `1m`).
    #[serde(default)]
    pub window: Option<String>,
    /// How long it stays open before a probe.
    pub cool_down: String,
}

impl From<BreakerSpec> for BreakerDefinition {
    fn from(spec: BreakerSpec) -> Self {
        Self {
            tool_id: spec.tool_id,
            tool_ids: spec.tool_ids,
            runner_id: spec.runner_id,
            runner_ids: spec.runner_ids,
            failures: spec.failures,
            failure_rate: spec.failure_rate,
            min_calls: spec.min_calls,
            window: spec.window,
            cool_down: spec.cool_down,
        }
    }
}

/// `budget:` — limits on one execution (top level of a file, or in a rule).
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a `budget` mapping with any of `max_steps`, `max_calls_per_tool`, \
                 `max_wall_time`, `max_retries`, `max_cost`, `max_tokens`, `on_exceed`, \
                 `approval_wait`"
)]
pub struct BudgetSpec {
    /// Tool steps per execution.
    #[serde(default)]
    pub max_steps: Option<i64>,
    /// Steps per tool id per execution.
    #[serde(default)]
    pub max_calls_per_tool: Option<i64>,
    /// Wall time, a Go duration (`10m`).
    #[serde(default)]
    pub max_wall_time: Option<String>,
    /// Retries per execution.
    #[serde(default)]
    pub max_retries: Option<i64>,
    /// Cost limit per unit (`usd: 0.50`).
    #[serde(default)]
    pub max_cost: Option<BTreeMap<String, f64>>,
    /// Model tokens per execution (LLM gateway).
    #[serde(default)]
    pub max_tokens: Option<i64>,
    /// `deny` or `require_approval` (model calls).
    #[serde(default)]
    pub on_exceed: Option<String>,
    /// How long a model call waits for a budget raise (`2m`).
    #[serde(default)]
    pub approval_wait: Option<String>,
}

impl From<BudgetSpec> for BudgetDefinition {
    fn from(spec: BudgetSpec) -> Self {
        Self {
            max_steps: spec.max_steps,
            max_calls_per_tool: spec.max_calls_per_tool,
            max_wall_time: spec.max_wall_time,
            max_retries: spec.max_retries,
            max_cost: spec.max_cost,
            max_tokens: spec.max_tokens,
            on_exceed: spec.on_exceed,
            approval_wait: spec.approval_wait,
        }
    }
}

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
