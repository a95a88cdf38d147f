//! Compiled policies and their evaluation. [`CompiledRules`] is one file after compiling;
//! [`RuleSet`] is what applies to one agent (a file's rules, or an agent file merged with the
//! global file), sorted by priority. `CompiledPolicy`, the engine built from rule sets, is in
//! `compiled_policy.rs`.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::compile::default_reason;
use super::concurrency::Concurrency;
use super::conditions::Conditions;
use crate::guardrails::breaker::BreakerSet;
use crate::guardrails::budget::Budget;
use crate::guardrails::concurrency::RunningLimits;
use crate::policy::engine::{Decision, PolicyDecision, PolicyInput};

/// One compiled rule.
#[derive(Clone, Debug)]
pub struct CompiledRule {
    /// Position of the rule in its file (for messages).
    pub(super) index: usize,
    /// Evaluation order, ascending.
    pub(super) priority: i64,
    /// What must hold.
    pub(super) conditions: Conditions,
    /// Verdict returned when the conditions hold.
    pub(super) outcome: PolicyDecision,
}

/// One policy file, compiled: its rules in file order and its default, if it has one.
#[derive(Clone, Debug)]
pub struct CompiledRules {
    rules: Vec<Arc<CompiledRule>>,
    default: Option<PolicyDecision>,
    budget: Option<Budget>,
    breakers: BreakerSet,
    concurrency: Concurrency,
    models: Option<Arc<super::models::ModelAllowList>>,
}

impl CompiledRules {
    /// Returns these rules with the file's `models.allow` list.
    #[must_use]
    pub fn with_models(mut self, models: Option<super::models::ModelAllowList>) -> Self {
        self.models = models.map(Arc::new);
        self
    }

    /// Bundles compiled rules with the file's default, budget and circuit breakers.
    pub(super) fn new(
        rules: Vec<Arc<CompiledRule>>,
        default: Option<PolicyDecision>,
        budget: Option<Budget>,
        breakers: BreakerSet,
    ) -> Self {
        Self {
            rules,
            default,
            budget,
            breakers,
            concurrency: Concurrency::default(),
            models: None,
        }
    }

    /// Returns these rules with the file's `concurrency:`.
    #[must_use]
    pub(super) fn with_concurrency(mut self, concurrency: Concurrency) -> Self {
        self.concurrency = concurrency;
        self
    }

    /// Returns the file's `concurrency:`.
    pub fn concurrency(&self) -> &Concurrency {
        &self.concurrency
    }

    /// Returns the file's circuit breakers.
    pub fn breakers(&self) -> &BreakerSet {
        &self.breakers
    }

    /// Returns the number of rules.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// Returns whether the file has no rules.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

/// A rule id or priority used both by an agent file and by the global file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MergeConflict {
    /// Index of the rule in the agent file.
    pub agent_rule: usize,
    /// Index of the rule in the global file.
    pub global_rule: usize,
    /// `true` for a shared id, `false` for a shared priority.
    pub same_id: bool,
    /// What is shared, for messages (`rule id `x``, `priority 10`).
    pub shared: String,
}

impl fmt::Display for MergeConflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} is used both by the agent file and by the global file",
            self.shared
        )
    }
}

/// The rules that apply to one agent, sorted by priority, and the default after them.
#[derive(Clone, Debug)]
pub struct RuleSet {
    pub(super) rules: Vec<Arc<CompiledRule>>,
    default: PolicyDecision,
    /// Budget of every execution these rules apply to.
    budget: Option<Arc<Budget>>,
    /// Running limits of the agent (`concurrency.max_running` and `concurrency.labels`).
    pub(super) running: RunningLimits,
    /// Models the agent may call through the LLM gateway (`None`: any).
    pub(super) models: Option<Arc<super::models::ModelAllowList>>,
}

impl RuleSet {
    /// Returns the rule set of a single file (file default, else deny `default`).
    pub fn single(file: &CompiledRules) -> Self {
        let mut set = Self::build(
            file.rules.clone(),
            file.default.clone(),
            file.budget.clone(),
        );
        set.running = file.concurrency.running(None);
        set.models.clone_from(&file.models);
        set
    }

    /// Returns an agent file's rules merged with the global file's: ids and priorities must be
    /// unique across both; the agent file's default applies, else the global file's.
    pub fn merged(
        agent: &CompiledRules,
        global: &CompiledRules,
    ) -> Result<Self, Vec<MergeConflict>> {
        let mut conflicts = Vec::new();
        for agent_rule in &agent.rules {
            for global_rule in &global.rules {
                if agent_rule.outcome.rule_id == global_rule.outcome.rule_id {
                    conflicts.push(MergeConflict {
                        agent_rule: agent_rule.index,
                        global_rule: global_rule.index,
                        same_id: true,
                        shared: format!("rule id `{}`", agent_rule.outcome.rule_id),
                    });
                }
                if agent_rule.priority == global_rule.priority {
                    conflicts.push(MergeConflict {
                        agent_rule: agent_rule.index,
                        global_rule: global_rule.index,
                        same_id: false,
                        shared: format!("priority {}", agent_rule.priority),
                    });
                }
            }
        }
        if !conflicts.is_empty() {
            return Err(conflicts);
        }
        let rules = agent.rules.iter().chain(&global.rules).cloned().collect();
        // The agent file's budget keys win; the keys it does not set come from the global file.
        let budget = match (&agent.budget, &global.budget) {
            (Some(agent), Some(global)) => Some(agent.or(global)),
            (agent, global) => agent.clone().or_else(|| global.clone()),
        };
        let mut set = Self::build(
            rules,
            agent.default.clone().or_else(|| global.default.clone()),
            budget,
        );
        // As budget keys: the agent file's keys win, else the global ones apply.
        set.running = agent.concurrency.running(Some(&global.concurrency));
        // The agent file's `models.allow` replaces the global one.
        set.models = agent.models.clone().or_else(|| global.models.clone());
        Ok(set)
    }

    fn build(
        mut rules: Vec<Arc<CompiledRule>>,
        default: Option<PolicyDecision>,
        budget: Option<Budget>,
    ) -> Self {
        rules.sort_by_key(|rule| rule.priority);
        debug_assert!(
            rules
                .iter()
                .map(|rule| rule.priority)
                .collect::<HashSet<_>>()
                .len()
                == rules.len(),
            "priorities are unique (checked at compile and merge)"
        );
        let default = default.unwrap_or_else(|| {
            PolicyDecision::plain(Decision::Deny, "default", &default_reason("deny"))
        });
        Self {
            rules,
            default,
            budget: budget.filter(|budget| !budget.is_empty()).map(Arc::new),
            running: RunningLimits::default(),
            models: None,
        }
    }

    /// Returns the verdict of the first matching rule, else the default, with the budget in
    /// force: the rule's limits within the file's.
    pub fn evaluate(&self, input: &PolicyInput) -> PolicyDecision {
        let mut decision = self
            .rules
            .iter()
            .find(|rule| {
                let fail_closed = matches!(
                    rule.outcome.decision,
                    Decision::Deny | Decision::RequireApproval
                );
                rule.conditions.hold(input, fail_closed)
            })
            .map_or_else(|| self.default.clone(), |rule| rule.outcome.clone());
        decision.budget = match (decision.budget.take(), &self.budget) {
            (Some(rule), Some(file)) => Some(Arc::new(file.tighter(&rule))),
            (Some(rule), None) => Some(rule),
            (None, file) => file.clone(),
        };
        decision
    }

    /// Returns the verdict for a call of `input.tool_id` whatever its arguments: the first
    /// matching rule that does not look at the arguments, else the default (rules with
    /// argument predicates are passed over, since other arguments may or may not match them).
    pub fn evaluate_any_arguments(&self, input: &PolicyInput) -> PolicyDecision {
        self.rules
            .iter()
            .find(|rule| !rule.conditions.look_at_arguments() && rule.conditions.hold(input, true))
            .map_or_else(|| self.default.clone(), |rule| rule.outcome.clone())
    }

    /// Returns the budget of every execution these rules apply to.
    pub fn budget(&self) -> Option<Arc<Budget>> {
        self.budget.clone()
    }

    /// Returns the number of rules.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// Returns whether there are no rules (only the default applies).
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Returns the longest rate-limit window of these rules and the default.
    pub fn longest_rate_window(&self) -> Option<Duration> {
        self.rules
            .iter()
            .map(|rule| &rule.outcome)
            .chain(std::iter::once(&self.default))
            .filter_map(|outcome| outcome.rate_limit.as_ref().map(|limit| limit.window))
            .max()
    }
}
