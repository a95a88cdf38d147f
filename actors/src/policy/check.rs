//! The parts of an `invoke_tool` check that need nothing of the policy actor's state, shared by
//! the actor and by the executions that check a call themselves.
//!
//! Most calls only meet the rule (and maybe a budget): the rule set is immutable and the
//! execution's usage travels in the input. Only a rate limit (its sliding windows) and a circuit
//! breaker (its state) live in the policy actor. An execution therefore evaluates the policy in
//! force itself ([`check_without_actor`]) and asks the actor only when the call meets one of
//! those two, which saves a round trip per tool call on the common path.

use std::time::{Duration, Instant};

use super::DenialKind;
use super::engine::{Decision, PolicyDecision, PolicyEngine, PolicyInput};
use crate::metrics::Metrics;

/// Decides a call without the policy actor, or returns `None` when its answer depends on the
/// actor's state: the tool has a circuit breaker, or the call would be allowed under a rule rate
/// limit. The answer is the one the actor would give, and is counted the same way.
pub fn check_without_actor(
    engine: &dyn PolicyEngine,
    input: &PolicyInput,
    metrics: &Metrics,
) -> Option<PolicyDecision> {
    if engine.breakers().config(&input.tool_id).is_some() {
        return None;
    }
    let started = Instant::now();
    let mut decision = engine.evaluate(input);
    if decision.decision == Decision::Allow && decision.rate_limit.is_some() {
        return None;
    }
    let within_budget =
        decision.decision != Decision::Deny && !deny_over_budget(&mut decision, input, metrics);
    if within_budget && decision.decision == Decision::Allow {
        decision.max_concurrent_steps = engine.tool_limits().limit(&input.tool_id);
    }
    record(metrics, started, &decision);
    Some(decision)
}

/// Turns `decision` into a denial naming the budget when the call would exceed the execution's
/// budget; returns whether it did.
pub(super) fn deny_over_budget(
    decision: &mut PolicyDecision,
    input: &PolicyInput,
    metrics: &Metrics,
) -> bool {
    let Some(budget) = &decision.budget else {
        return false;
    };
    let elapsed = Duration::from_millis(input.duration_ms);
    let Some(exceeded) = budget.check(&input.usage, &input.tool_id, elapsed) else {
        return false;
    };
    metrics.guardrails.budget_denied(exceeded.limit);
    decision.deny(DenialKind::BudgetExceeded, exceeded.reason);
    true
}

/// Counts one decision: its evaluation time and its outcome by rule.
pub(super) fn record(metrics: &Metrics, started: Instant, decision: &PolicyDecision) {
    metrics
        .operator
        .policy_evaluation
        .observe(started.elapsed().as_secs_f64());
    metrics.policy_decision(decision.decision.as_str(), &decision.rule_id);
}
