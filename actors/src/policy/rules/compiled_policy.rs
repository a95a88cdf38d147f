//! [`CompiledPolicy`]: the engine the policy actor holds, routing each agent to its rule set
//! (one set for a single file, or one per agent plus the global one for a directory) and
//! answering the kernel's `PolicyEngine` questions.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::compiled::RuleSet;
use crate::guardrails::breaker::BreakerSet;
use crate::guardrails::budget::Budget;
use crate::guardrails::concurrency::{LabelLimit, ToolLimits};
use crate::ids::AgentId;
use crate::policy::engine::{Decision, PolicyDecision, PolicyEngine, PolicyInput};

/// Which rule set answers which agent.
#[derive(Clone, Debug)]
enum Routing {
    /// One file for every agent.
    Single(RuleSet),
    /// A directory: per-agent sets (already merged with the global file) and the global set.
    PerAgent {
        agents: HashMap<String, RuleSet>,
        global: Option<RuleSet>,
    },
}

impl Routing {
    /// Returns the rule set that answers `agent_id`, if any.
    fn rules(&self, agent_id: &AgentId) -> Option<&RuleSet> {
        match self {
            Self::Single(rules) => Some(rules),
            Self::PerAgent { agents, global } => agents.get(agent_id.as_str()).or(global.as_ref()),
        }
    }
}

/// A loaded policy: the engine behind `--policy FILE|DIR`.
#[derive(Clone, Debug)]
pub struct CompiledPolicy {
    routing: Routing,
    digest: String,
    breakers: BreakerSet,
    tool_limits: ToolLimits,
}

/// Rule id reported when a directory has neither a file for the agent nor a global file.
pub const AGENT_DEFAULT_RULE_ID: &str = "agent-default";

impl CompiledPolicy {
    /// Returns the engine of a single policy file.
    pub fn single(rules: RuleSet, digest: String) -> Self {
        Self {
            routing: Routing::Single(rules),
            digest,
            breakers: BreakerSet::default(),
            tool_limits: ToolLimits::default(),
        }
    }

    /// Returns this policy with kernel-wide circuit breakers (a single file's, or `_global`'s).
    #[must_use]
    pub fn with_breakers(mut self, breakers: BreakerSet) -> Self {
        self.breakers = breakers;
        self
    }

    /// Returns this policy with kernel-wide tool limits (a single file's, or `_global`'s).
    #[must_use]
    pub fn with_tool_limits(mut self, limits: ToolLimits) -> Self {
        self.tool_limits = limits;
        self
    }

    /// Returns the engine of a policy directory: `agents` maps agent ids to their merged rule
    /// sets; other agents use `global`, or are denied with rule id `agent-default` without it.
    pub fn per_agent(
        agents: HashMap<String, RuleSet>,
        global: Option<RuleSet>,
        digest: String,
    ) -> Self {
        Self {
            routing: Routing::PerAgent { agents, global },
            digest,
            breakers: BreakerSet::default(),
            tool_limits: ToolLimits::default(),
        }
    }
}

impl PolicyEngine for CompiledPolicy {
    fn evaluate(&self, input: &PolicyInput) -> PolicyDecision {
        match &self.routing {
            Routing::Single(rules) => rules.evaluate(input),
            Routing::PerAgent { agents, global } => {
                match agents.get(input.agent_id.as_str()).or(global.as_ref()) {
                    Some(rules) => rules.evaluate(input),
                    None => PolicyDecision::plain(
                        Decision::Deny,
                        AGENT_DEFAULT_RULE_ID,
                        &format!(
                            "no policy file for agent {} and no _global policy",
                            input.agent_id
                        ),
                    ),
                }
            }
        }
    }

    fn evaluate_any_arguments(&self, input: &PolicyInput) -> PolicyDecision {
        match &self.routing {
            Routing::Single(rules) => rules.evaluate_any_arguments(input),
            Routing::PerAgent { agents, global } => {
                match agents.get(input.agent_id.as_str()).or(global.as_ref()) {
                    Some(rules) => rules.evaluate_any_arguments(input),
                    None => self.evaluate(input),
                }
            }
        }
    }

    fn digest(&self) -> String {
        self.digest.clone()
    }

    fn rule_ids(&self) -> Vec<String> {
        let sets: Vec<&RuleSet> = match &self.routing {
            Routing::Single(rules) => vec![rules],
            Routing::PerAgent { agents, global } => {
                let mut names: Vec<&String> = agents.keys().collect();
                names.sort();
                names
                    .into_iter()
                    .filter_map(|name| agents.get(name))
                    .chain(global.as_ref())
                    .collect()
            }
        };
        let mut ids: Vec<String> = Vec::new();
        for rule in sets.into_iter().flat_map(|set| set.rules.iter()) {
            if !ids.contains(&rule.outcome.rule_id) {
                ids.push(rule.outcome.rule_id.clone());
            }
        }
        ids
    }

    fn breakers(&self) -> &BreakerSet {
        &self.breakers
    }

    fn max_running(&self, agent_id: &AgentId) -> Option<u32> {
        self.routing.rules(agent_id)?.running.max_running
    }

    fn label_limits(&self, agent_id: &AgentId) -> Vec<LabelLimit> {
        let set = self.routing.rules(agent_id);
        set.map_or_else(Vec::new, |set| set.running.labels.clone())
    }

    fn tool_limits(&self) -> &ToolLimits {
        &self.tool_limits
    }

    fn agent_budget(&self, agent_id: &AgentId) -> Option<Arc<Budget>> {
        self.routing.rules(agent_id)?.budget()
    }

    fn names_agent(&self, agent_id: &AgentId) -> bool {
        matches!(&self.routing, Routing::PerAgent { agents, .. } if agents.contains_key(agent_id.as_str()))
    }

    fn model_refusal(&self, agent_id: &AgentId, model_id: &str) -> Option<String> {
        self.routing
            .rules(agent_id)?
            .models
            .as_ref()?
            .refusal(model_id)
    }

    fn longest_rate_window(&self) -> Option<Duration> {
        match &self.routing {
            Routing::Single(rules) => rules.longest_rate_window(),
            Routing::PerAgent { agents, global } => agents
                .values()
                .chain(global)
                .filter_map(RuleSet::longest_rate_window)
                .max(),
        }
    }
}
