//! Execution budgets (docs/guardrails.md, "Budgets per execution"): limits a policy puts on
//! one execution — tool steps, calls per tool id, wall time, retries in total and cost — and
//! the usage they are checked against.
//!
//! Usage is folded from the execution's events only ([`BudgetUsage::apply`]), so an execution
//! rebuilt after passivation or a restart counts exactly what its log says. A budget is checked
//! when an `invoke_tool` intent would create a step ([`Budget::check`]); retries are checked when
//! a retryable failure would be retried (the step carries the retry budget in force when it was
//! created, `step.created.max_retries`).

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::ids::ToolId;

pub use super::usage::{BudgetUsage, Cost, parse_cost};

/// Largest number of cost units a result may carry.
pub const MAX_COST_UNITS: usize = 32;
/// Longest cost unit name, in bytes.
pub const MAX_COST_UNIT_BYTES: usize = 64;

/// A wall-time limit and the text the policy file gave it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WallTime {
    /// The limit.
    pub limit: Duration,
    /// As written (`10m`), for messages.
    pub text: String,
}

/// Limits on one execution; every absent limit is unlimited.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Budget {
    /// Tool steps the execution may create in total.
    pub max_steps: Option<u64>,
    /// Steps the execution may create for any one tool id.
    pub max_calls_per_tool: Option<u64>,
    /// No tool step is created once this long has passed since the execution was created.
    pub max_wall_time: Option<WallTime>,
    /// Retries (`step.retried`) the execution may have in total.
    pub max_retries: Option<u64>,
    /// Cost per unit (`usd`, `tokens`, ...): no tool step is created once a unit's spend has
    /// reached its limit.
    pub max_cost: BTreeMap<String, f64>,
    /// Tokens (input + output) the execution's model calls may use.
    pub max_tokens: Option<u64>,
    /// What a model call finds when `max_cost` or `max_tokens` is spent (`None`: deny).
    pub on_exceed: Option<OnExceed>,
    /// How long a model call waits for an operator to raise the budget (`require_approval`).
    pub approval_wait: Option<Duration>,
}

/// What a model call through the LLM gateway gets when the execution's budget is spent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnExceed {
    /// Refused at once (`deny`, the default).
    Deny,
    /// The execution blocks on an operator's `budget.approve` and the call waits, up to
    /// `approval_wait` (`require_approval`).
    RequireApproval,
}

/// How long a model call waits for a budget raise when the policy does not say.
pub const DEFAULT_APPROVAL_WAIT: Duration = Duration::from_secs(60);

/// The limit of a [`Budget`] that refused a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BudgetLimit {
    /// `max_steps`.
    MaxSteps,
    /// `max_calls_per_tool`.
    MaxCallsPerTool,
    /// `max_wall_time`.
    MaxWallTime,
    /// `max_cost` (any unit).
    MaxCost,
    /// `max_tokens`.
    MaxTokens,
}

impl BudgetLimit {
    /// The key as a policy file spells it (also the `budget` label of
    /// `keel_budget_denials_total`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::MaxSteps => "max_steps",
            Self::MaxCallsPerTool => "max_calls_per_tool",
            Self::MaxWallTime => "max_wall_time",
            Self::MaxCost => "max_cost",
            Self::MaxTokens => "max_tokens",
        }
    }
}

/// A step a budget refused: the limit, and the denial reason that names it (the text the agent
/// and `intent.denied` carry).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BudgetExceeded {
    /// The limit reached.
    pub limit: BudgetLimit,
    /// The key reached as an operator raises it: `max_cost.<unit>` or `max_tokens` (other
    /// limits: their key).
    pub key: String,
    /// `budget exceeded: <limit> ...`.
    pub reason: String,
}

impl Budget {
    /// Returns whether no limit is set.
    pub fn is_empty(&self) -> bool {
        self.max_steps.is_none()
            && self.max_calls_per_tool.is_none()
            && self.max_wall_time.is_none()
            && self.max_retries.is_none()
            && self.max_cost.is_empty()
            && self.max_tokens.is_none()
    }

    /// How long a model call waits for a budget raise.
    pub fn approval_wait(&self) -> Duration {
        self.approval_wait.unwrap_or(DEFAULT_APPROVAL_WAIT)
    }

    /// Returns `self` with every key `other` sets and `self` does not (an agent file's budget
    /// over the global file's).
    pub fn or(&self, other: &Self) -> Self {
        let mut max_cost = other.max_cost.clone();
        max_cost.extend(self.max_cost.clone());
        Self {
            max_steps: self.max_steps.or(other.max_steps),
            max_calls_per_tool: self.max_calls_per_tool.or(other.max_calls_per_tool),
            max_wall_time: self
                .max_wall_time
                .clone()
                .or_else(|| other.max_wall_time.clone()),
            max_retries: self.max_retries.or(other.max_retries),
            max_cost,
            max_tokens: self.max_tokens.or(other.max_tokens),
            on_exceed: self.on_exceed.or(other.on_exceed),
            approval_wait: self.approval_wait.or(other.approval_wait),
        }
    }

    /// Returns the tighter of both budgets, key by key (a rule's budget within its file's).
    pub fn tighter(&self, other: &Self) -> Self {
        fn min<T: Ord + Copy>(a: Option<T>, b: Option<T>) -> Option<T> {
            match (a, b) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        }
        let max_wall_time = match (&self.max_wall_time, &other.max_wall_time) {
            (Some(a), Some(b)) if b.limit < a.limit => Some(b.clone()),
            (Some(a), _) => Some(a.clone()),
            (None, b) => b.clone(),
        };
        let mut max_cost = self.max_cost.clone();
        for (unit, limit) in &other.max_cost {
            let entry = max_cost.entry(unit.clone()).or_insert(*limit);
            *entry = entry.min(*limit);
        }
        Self {
            max_steps: min(self.max_steps, other.max_steps),
            max_calls_per_tool: min(self.max_calls_per_tool, other.max_calls_per_tool),
            max_wall_time,
            max_retries: min(self.max_retries, other.max_retries),
            max_cost,
            max_tokens: min(self.max_tokens, other.max_tokens),
            on_exceed: self.on_exceed.or(other.on_exceed),
            approval_wait: self.approval_wait.or(other.approval_wait),
        }
    }

    /// Checks whether one more step of `tool_id` fits, `elapsed` after creation. Returns the
    /// limit that refuses it, with the denial reason naming it, when it does not.
    pub fn check(
        &self,
        usage: &BudgetUsage,
        tool_id: &ToolId,
        elapsed: Duration,
    ) -> Option<BudgetExceeded> {
        let exceeded = |limit: BudgetLimit, reason| {
            Some(BudgetExceeded {
                limit,
                key: limit.as_str().to_owned(),
                reason,
            })
        };
        if let Some(max) = self.max_steps
            && usage.steps >= max
        {
            return exceeded(
                BudgetLimit::MaxSteps,
                format!(
                    "budget exceeded: max_steps {max} reached ({} tool steps so far)",
                    usage.steps
                ),
            );
        }
        if let Some(max) = self.max_calls_per_tool {
            let calls = usage.calls(tool_id);
            if calls >= max {
                return exceeded(
                    BudgetLimit::MaxCallsPerTool,
                    format!(
                        "budget exceeded: max_calls_per_tool {max} reached for tool {tool_id} \
                         ({calls} calls so far)"
                    ),
                );
            }
        }
        if let Some(wall) = &self.max_wall_time
            && elapsed >= wall.limit
        {
            return exceeded(
                BudgetLimit::MaxWallTime,
                format!(
                    "budget exceeded: max_wall_time {} passed ({} ms since creation)",
                    wall.text,
                    elapsed.as_millis()
                ),
            );
        }
        self.check_cost(usage)
    }

    /// Checks the spending limits alone, `max_cost` and `max_tokens` (also what a model call
    /// through the LLM gateway is checked against), with the execution's raises in place of
    /// the policy's limits: the first limit that is reached refuses.
    pub fn check_cost(&self, usage: &BudgetUsage) -> Option<BudgetExceeded> {
        for (unit, max) in &self.max_cost {
            let max = usage.raised_cost.get(unit).copied().unwrap_or(*max);
            let spent = usage.cost.get(unit).copied().unwrap_or(0.0);
            if spent >= max {
                return Some(BudgetExceeded {
                    limit: BudgetLimit::MaxCost,
                    key: format!("max_cost.{unit}"),
                    reason: format!(
                        "budget exceeded: max_cost.{unit} {max} reached ({spent} spent)"
                    ),
                });
            }
        }
        if let Some(max) = usage.raised_tokens.or(self.max_tokens)
            && self.max_tokens.is_some()
            && usage.llm_tokens >= max
        {
            return Some(BudgetExceeded {
                limit: BudgetLimit::MaxTokens,
                key: "max_tokens".to_owned(),
                reason: format!(
                    "budget exceeded: max_tokens {max} reached ({} model tokens used)",
                    usage.llm_tokens
                ),
            });
        }
        None
    }

    /// Returns the budget as JSON (`max_wall_time` as written, cost per unit).
    pub fn limits_json(&self) -> Value {
        let mut limits = Map::new();
        if let Some(max) = self.max_steps {
            limits.insert("max_steps".into(), json!(max));
        }
        if let Some(max) = self.max_calls_per_tool {
            limits.insert("max_calls_per_tool".into(), json!(max));
        }
        if let Some(wall) = &self.max_wall_time {
            limits.insert("max_wall_time".into(), json!(wall.text));
        }
        if let Some(max) = self.max_retries {
            limits.insert("max_retries".into(), json!(max));
        }
        if !self.max_cost.is_empty() {
            limits.insert("max_cost".into(), json!(self.max_cost));
        }
        if let Some(max) = self.max_tokens {
            limits.insert("max_tokens".into(), json!(max));
        }
        Value::Object(limits)
    }

    /// Returns what is left of the budget after `usage`, `elapsed` after creation (never
    /// negative; only the limits that are set).
    pub fn remaining_json(&self, usage: &BudgetUsage, elapsed: Duration) -> Value {
        let mut left = Map::new();
        if let Some(max) = self.max_steps {
            left.insert("steps".into(), json!(max.saturating_sub(usage.steps)));
        }
        if let Some(max) = self.max_calls_per_tool {
            let per_tool: BTreeMap<&str, u64> = usage
                .calls
                .iter()
                .map(|(tool, calls)| (tool.as_str(), max.saturating_sub(*calls)))
                .collect();
            left.insert("calls_per_tool".into(), json!(per_tool));
        }
        if let Some(wall) = &self.max_wall_time {
            let ms = wall.limit.saturating_sub(elapsed).as_millis();
            left.insert(
                "wall_time_ms".into(),
                json!(u64::try_from(ms).unwrap_or(u64::MAX)),
            );
        }
        if let Some(max) = self.max_retries {
            left.insert("retries".into(), json!(max.saturating_sub(usage.retries)));
        }
        if !self.max_cost.is_empty() {
            let cost: BTreeMap<&str, f64> = self
                .max_cost
                .iter()
                .map(|(unit, max)| {
                    let max = usage.raised_cost.get(unit).unwrap_or(max);
                    let spent = usage.cost.get(unit).copied().unwrap_or(0.0);
                    (unit.as_str(), (max - spent).max(0.0))
                })
                .collect();
            left.insert("cost".into(), json!(cost));
        }
        if let Some(max) = self.max_tokens {
            let max = usage.raised_tokens.unwrap_or(max);
            left.insert("tokens".into(), json!(max.saturating_sub(usage.llm_tokens)));
        }
        Value::Object(left)
    }
}

#[cfg(test)]
#[path = "budget_tests.rs"]
mod tests;
