//! `PolicyActor`: answers every `invoke_tool` check with the loaded engine, applies rule rate
//! limits after an allow, and swaps engines on reload.
//!
//! Rate-limit windows survive restarts: when the actor starts (kernel start, or a supervised
//! restart) and when a reload makes the engine's longest window longer, it reads the allowed
//! tool calls of that period from the store (`Store::tool_calls_since`). A store that cannot
//! answer is logged and the windows start from what is in memory.

use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::time::Instant;

use super::engine::{Decision, DenialKind, PolicyDecision, PolicyEngine, PolicyInput};
use super::messages::PolicyMsg;
use super::windows::RateWindows;
use crate::guardrails::breaker::Breakers;
use crate::metrics::Metrics;
use crate::store::Store;
use crate::time::{self, Clock};

/// Dependencies of the policy actor.
pub struct PolicyArgs {
    /// Engine in force.
    pub engine: Arc<dyn PolicyEngine>,
    /// Hooks of the policy in force, in order.
    pub hooks: Arc<[crate::hooks::HookSpec]>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Where allowed tool calls are recorded (to rebuild the rate-limit windows).
    pub store: Arc<dyn Store>,
    /// The kernel's clock (stored call times are compared with it).
    pub clock: Clock,
}

/// State of the policy actor.
pub struct PolicyState {
    engine: Arc<dyn PolicyEngine>,
    hooks: Arc<[crate::hooks::HookSpec]>,
    metrics: Arc<Metrics>,
    store: Arc<dyn Store>,
    clock: Clock,
    windows: RateWindows,
    breakers: Breakers,
}

/// The policy actor.
pub struct PolicyActor;

impl Actor for PolicyActor {
    type Msg = PolicyMsg;
    type State = PolicyState;
    type Arguments = PolicyArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: PolicyArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let mut state = PolicyState {
            windows: RateWindows::new(Instant::now()),
            engine: args.engine,
            hooks: args.hooks,
            metrics: args.metrics,
            store: args.store,
            clock: args.clock,
            breakers: Breakers::default(),
        };
        let horizon = state.engine.longest_rate_window();
        load_history(&mut state, horizon).await;
        super::breakers::rebuild(
            &mut state.breakers,
            &*state.engine,
            &*state.store,
            &state.clock,
            &state.metrics,
        )
        .await;
        Ok(state)
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            PolicyMsg::CheckIntent(input, reply) => {
                let started = Instant::now();
                let decision = state.engine.evaluate(&input);
                let decision = admit(state, &input, decision, started);
                super::check::record(&state.metrics, started.into_std(), &decision);
                let _ = reply.send(decision);
            }
            PolicyMsg::Admit {
                input,
                decision,
                started,
                reply,
            } => {
                let decision = admit(state, &input, *decision, Instant::now());
                super::check::record(&state.metrics, started, &decision);
                let _ = reply.send(decision);
            }
            PolicyMsg::Evaluate(input, reply) => {
                let _ = reply.send(state.engine.evaluate(&input));
            }
            PolicyMsg::Hooks {
                point,
                input,
                rule_id,
                reply,
            } => {
                let hooks = &state.hooks;
                let applicable = if hooks.iter().any(|hook| hook.point == point) {
                    let rule_id = rule_id.unwrap_or_else(|| state.engine.evaluate(&input).rule_id);
                    hooks
                        .iter()
                        .filter(|hook| hook.applies(point, &input.agent_id, &rule_id))
                        .cloned()
                        .collect()
                } else {
                    Vec::new()
                };
                let _ = reply.send(applicable);
            }
            PolicyMsg::AgentBudget(agent_id, reply) => {
                let _ = reply.send(state.engine.agent_budget(&agent_id));
            }
            PolicyMsg::ToolResults(results, reply) => {
                let changes = super::breakers::record(
                    &mut state.breakers,
                    &*state.engine,
                    &results,
                    &state.metrics,
                );
                let _ = reply.send(changes);
            }
            PolicyMsg::Breakers(reply) => {
                let view = state
                    .breakers
                    .view(state.clock.now(), state.engine.breakers());
                let _ = reply.send(view);
            }
            PolicyMsg::ReleaseRateSlot(slot) => {
                state
                    .windows
                    .release(&(slot.agent_id, slot.tool_id), slot.at);
            }
            PolicyMsg::ReplacePolicy(super::InForce { engine, hooks }) => {
                state.hooks = hooks;
                tracing::debug!(policy.digest = %engine.digest(), "policy engine replaced");
                let horizon = engine.longest_rate_window();
                let breakers_changed = engine.breakers().horizon()
                    != state.engine.breakers().horizon()
                    || engine.breakers().0.len() != state.engine.breakers().0.len();
                state.engine = engine;
                if horizon != state.windows.horizon() {
                    load_history(state, horizon).await;
                }
                if breakers_changed {
                    // Rebuilt from the log: results are stored before they are reported.
                    state.breakers = Breakers::default();
                    super::breakers::rebuild(
                        &mut state.breakers,
                        &*state.engine,
                        &*state.store,
                        &state.clock,
                        &state.metrics,
                    )
                    .await;
                }
            }
        }
        Ok(())
    }
}

/// Sets the windows' horizon and loads from the store the allowed calls they are missing.
async fn load_history(state: &mut PolicyState, horizon: Option<std::time::Duration>) {
    let Some(request) = state
        .windows
        .set_horizon(horizon, Instant::now(), state.clock.now())
    else {
        return;
    };
    match state.store.tool_calls_since(request.since).await {
        Ok(calls) => {
            state
                .windows
                .merge_history(request, &calls, Instant::now(), state.clock.now());
            tracing::info!(calls = calls.len(), since = %time::format(&request.since), "rate-limit windows rebuilt from the store");
        }
        Err(error) => tracing::error!(
            error = %error,
            "cannot read past tool calls; rate limits count only calls from now on"
        ),
    }
}

/// Applies the budget, the breaker and the rate limit to the engine's `decision` on `input`.
fn admit(
    state: &mut PolicyState,
    input: &PolicyInput,
    mut decision: PolicyDecision,
    now: Instant,
) -> PolicyDecision {
    if decision.decision == Decision::Deny {
        return decision;
    }
    // Budgets, then breakers, then the rate limit: a refused call takes no rate-limit slot.
    if super::check::deny_over_budget(&mut decision, input, &state.metrics) {
        return decision;
    }
    if let Some(config) = state.engine.breakers().config(&input.tool_id)
        && let Some(reason) =
            state
                .breakers
                .admit(input.tool_id.as_str(), config, state.clock.now())
    {
        decision.deny(DenialKind::CircuitOpen, reason);
        return decision;
    }
    if decision.decision != Decision::Allow {
        return decision;
    }
    decision.max_concurrent_steps = state.engine.tool_limits().limit(&input.tool_id);
    let Some(limit) = decision.rate_limit.clone() else {
        return decision;
    };
    if state
        .windows
        .admit((input.agent_id.clone(), input.tool_id.clone()), &limit, now)
    {
        decision.rate_slot = Some(super::RateSlot {
            agent_id: input.agent_id.clone(),
            tool_id: input.tool_id.clone(),
            at: now,
        });
    } else {
        let reason = format!(
            "rate limit exceeded: max {} per {}",
            limit.max, limit.window_text
        );
        decision.deny(DenialKind::RateLimited, reason);
    }
    decision
}
