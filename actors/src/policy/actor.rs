//! `PolicyActor`: answers every `invoke_tool` check with the loaded engine, applies rule rate
//! limits after an allow, and swaps engines on reload.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

use super::engine::{Decision, PolicyDecision, PolicyEngine, PolicyInput};
use crate::metrics::Metrics;

/// Messages of the policy actor.
pub enum PolicyMsg {
    /// Decides about one tool call (rate limits included).
    CheckIntent(PolicyInput, RpcReplyPort<PolicyDecision>),
    /// Replaces the engine (hot reload); rate-limit windows are kept.
    ReplaceEngine(Arc<dyn PolicyEngine>),
}

/// Dependencies of the policy actor.
pub struct PolicyArgs {
    /// Engine in force.
    pub engine: Arc<dyn PolicyEngine>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
}

/// State of the policy actor.
pub struct PolicyState {
    engine: Arc<dyn PolicyEngine>,
    metrics: Arc<Metrics>,
    windows: HashMap<(String, String), VecDeque<Instant>>,
}

/// The policy actor.
pub struct PolicyActor;

impl Actor for PolicyActor {
    type Msg = PolicyMsg;
    type State = PolicyState;
    type Arguments = PolicyArgs;

    async fn pre_start(&self, _myself: ActorRef<Self::Msg>, args: PolicyArgs) -> Result<Self::State, ActorProcessingErr> {
        Ok(PolicyState { engine: args.engine, metrics: args.metrics, windows: HashMap::new() })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            PolicyMsg::CheckIntent(input, reply) => {
                let decision = check(state, &input, Instant::now());
                state.metrics.policy_decision(decision.decision.as_str(), &decision.rule_id);
                let _ = reply.send(decision);
            }
            PolicyMsg::ReplaceEngine(engine) => {
                tracing::info!(policy.digest = %engine.digest(), "policy engine replaced");
                state.engine = engine;
            }
        }
        Ok(())
    }
}

fn check(state: &mut PolicyState, input: &PolicyInput, now: Instant) -> PolicyDecision {
    let mut decision = state.engine.evaluate(input);
    if decision.decision != Decision::Allow {
        return decision;
    }
    let Some(limit) = decision.rate_limit.clone() else {
        return decision;
    };
    let window = state.windows.entry((input.agent_id.clone(), input.tool_id.clone())).or_default();
    while window.front().is_some_and(|at| now.duration_since(*at) >= limit.window) {
        window.pop_front();
    }
    if window.len() >= limit.max as usize {
        decision.decision = Decision::Deny;
        decision.reason = format!("rate limit exceeded: max {} per {}", limit.max, limit.window_text);
        return decision;
    }
    window.push_back(now);
    decision
}
