//! The parts of an `invoke_tool` check that need nothing of the policy actor's state, shared by
//! the actor and by the executions that check a call themselves.
//!
//! Most calls only meet the rule (and maybe a budget): the rule set is immutable and the
//! execution's usage travels in the input. Only a rate limit (its sliding windows) and a circuit
//! breaker (its state) live in the policy actor. An execution therefore evaluates the policy in
//! force itself ([`check_without_actor`]) and asks the actor only when the call meets one of
//! those two, which saves a round trip per tool call on the common path; the actor then
//! finishes the check from the verdict it is given (`PolicyMsg::Admit`), without evaluating
//! the rules again.

use std::time::{Duration, Instant};

use super::DenialKind;
use super::engine::{Decision, PolicyDecision, PolicyEngine, PolicyInput};
use crate::metrics::Metrics;

/// What an execution's own check of a call came to.
#[derive(Debug, PartialEq)]
pub enum Checked {
    /// Decided here, as the policy actor would have (and counted the same way).
    Decided(PolicyDecision),
    /// The engine's verdict, which the policy actor must finish (`PolicyMsg::Admit`): the tool
    /// has a circuit breaker, or the call would be allowed under a rule rate limit.
    NeedsActor(PolicyDecision),
}

/// Evaluates a call once and decides it without the policy actor unless its answer depends on
/// the actor's state.
pub fn check_without_actor(
    engine: &dyn PolicyEngine,
    input: &PolicyInput,
    metrics: &Metrics,
) -> Checked {
    let started = Instant::now();
    let mut decision = engine.evaluate(input);
    let stateful = engine.breakers().config(&input.tool_id).is_some()
        || (decision.decision == Decision::Allow && decision.rate_limit.is_some());
    if decision.decision != Decision::Deny && stateful {
        return Checked::NeedsActor(decision);
    }
    let within_budget =
        decision.decision != Decision::Deny && !deny_over_budget(&mut decision, input, metrics);
    if within_budget && decision.decision == Decision::Allow {
        decision.max_concurrent_steps = engine.tool_limits().limit(&input.tool_id);
    }
    record(metrics, started, &decision);
    Checked::Decided(decision)
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
