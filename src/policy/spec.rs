//! The YAML shape of a policy file, as serde structs that reject unknown keys and wrong types.
//! Each converts into the plain definitions of `keel_actors::policy::rules`, whose compiler
//! then checks meaning (regexes, globs, schedules, durations, uniqueness).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde::de::IgnoredAny;

use keel_actors::policy::rules::{
    BreakerDefinition, BudgetDefinition, ConcurrencyDefinition, LabelLimitDefinition,
    ToolLimitDefinition,
};

pub use super::spec_rule::{DefaultSpec, RateLimitSpec, RetrySpec, RuleSpec, ThenSpec, WhenSpec};

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
