//! `Dispatcher`: the actor shell around [`Dispatch`], the pure core that matches queued remote
//! jobs with idle runner connections. The shell decodes messages into core inputs, spawns and
//! stops runner actors, arms timers and tells executions, as the core's effects say. It also
//! supervises runner actors (temporary: a failed one is dropped and its job waits for its
//! deadline or the runner's return). It never calls another actor: claims are made by the
//! runner actors, so no dispatch pass can deadlock an execution.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent as RactorEvent};

use super::dispatch::{ConnectionKey, Dispatch, DispatchEffect, DispatchInput};
use super::holders;
use super::messages::{DispatcherMsg, RunnerMsg};
use super::runner_actor::{RunnerActor, RunnerArgs};
use crate::ids::ToolId;
use crate::kernel::context::Ctx;
use crate::push::Push;
use crate::supervision::{ActorKind, Keyed};
use crate::time::PendingTimers;

/// State of the dispatcher: the core and the runner actor of each connection.
pub struct DispatcherState {
    ctx: Arc<Ctx>,
    pub(super) core: Dispatch,
    runners: Keyed<ConnectionKey, RunnerMsg>,
    /// The tick, grace and release timers, aborted when the dispatcher stops.
    timers: PendingTimers,
    /// Tool ids whose concurrency gauges are shown.
    shown: BTreeSet<ToolId>,
}

/// The dispatcher actor.
pub struct Dispatcher;

impl Actor for Dispatcher {
    type Msg = DispatcherMsg;
    type State = DispatcherState;
    type Arguments = Arc<Ctx>;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        ctx: Arc<Ctx>,
    ) -> Result<Self::State, ActorProcessingErr> {
        let mut timers = PendingTimers::default();
        timers.keep(&myself.send_interval(Duration::from_secs(1), || DispatcherMsg::Tick));
        let mut core = Dispatch::default();
        let (limits, breakers) = policy_guards(&ctx);
        core.apply(DispatchInput::SetToolLimits(limits), ctx.now());
        core.apply(DispatchInput::SetRunnerBreakers(breakers), ctx.now());
        // Runner breakers open before a restart are still open: rebuilt from the log.
        rebuild_runner_breakers(&ctx, &mut core).await;
        let runners = Keyed::labelled(
            ActorKind::Runner,
            ctx.metrics.clone(),
            |key: &ConnectionKey| key.0.to_string(),
        );
        Ok(DispatcherState {
            ctx,
            core,
            runners,
            timers,
            shown: BTreeSet::new(),
        })
    }

    async fn post_stop(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.timers.abort_all();
        myself
            .stop_children_and_wait(
                Some("kernel shutdown".into()),
                Some(state.ctx.config.shutdown_timeout),
            )
            .await;
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let input = match message {
            DispatcherMsg::RunnerConnected {
                runner_id,
                consumer_id,
                connection,
                capabilities,
                sender,
            } => {
                let args = RunnerArgs {
                    ctx: state.ctx.clone(),
                    runner_id: runner_id.clone(),
                    consumer_id: consumer_id.clone(),
                    connection,
                    sender,
                };
                let key = (runner_id, consumer_id);
                let replaced = state.runners.take(&key);
                state
                    .runners
                    .spawn(&myself.get_cell(), key.clone(), RunnerActor, args)
                    .await?;
                if let Some(old) = replaced {
                    old.stop(Some("replaced by a new connection".into()));
                }
                DispatchInput::Connected {
                    key,
                    connection,
                    capabilities,
                }
            }
            DispatcherMsg::RunnerDisconnected {
                runner_id,
                consumer_id,
                connection,
            } => DispatchInput::Disconnected {
                key: (runner_id, consumer_id),
                connection,
            },
            DispatcherMsg::SetCapabilities { runner_id, tools } => {
                DispatchInput::SetCapabilities { runner_id, tools }
            }
            DispatcherMsg::Enqueue(job) => DispatchInput::Enqueue(job),
            DispatcherMsg::Recovered(job) => DispatchInput::Recovered(job),
            DispatcherMsg::RecoveredAtMostOnce(job) => DispatchInput::RecoveredAtMostOnce(job),
            DispatcherMsg::ReleaseRecovered { job_id } => {
                DispatchInput::ReleaseRecovered { job_id }
            }
            DispatcherMsg::ConnectionFree {
                runner_id,
                consumer_id,
            } => DispatchInput::ConnectionFree((runner_id, consumer_id)),
            DispatcherMsg::StepEnded {
                step_id,
                cancel_reason,
            } => DispatchInput::StepEnded {
                step_id,
                cancel_reason,
            },
            DispatcherMsg::RunnerGraceExpired {
                runner_id,
                consumer_id,
                generation,
            } => DispatchInput::GraceExpired {
                key: (runner_id, consumer_id),
                generation,
            },
            DispatcherMsg::Tick => DispatchInput::Tick,
            DispatcherMsg::PolicyReplaced => {
                let (limits, breakers) = policy_guards(&state.ctx);
                let changed = state.core.runner_breakers_differ(&breakers);
                state
                    .core
                    .apply(DispatchInput::SetRunnerBreakers(breakers), state.ctx.now());
                if changed {
                    rebuild_runner_breakers(&state.ctx, &mut state.core).await;
                }
                DispatchInput::SetToolLimits(limits)
            }
            DispatcherMsg::RunnerResult { runner_id, success } => {
                DispatchInput::RunnerResult { runner_id, success }
            }
            DispatcherMsg::Breakers(reply) => {
                let _ = reply.send(state.core.runner_breakers_view(state.ctx.now()));
                return Ok(());
            }
            DispatcherMsg::CheckReport { report, reply } => {
                let _ = reply.send(holders::decide(&state.core, &report));
                return Ok(());
            }
            DispatcherMsg::Observe(reply) => {
                let _ = reply.send(state.core.snapshot());
                return Ok(());
            }
        };
        let effects = state.core.apply(input, state.ctx.now());
        for effect in effects {
            carry_out(&myself, state, effect);
        }
        show_tool_slots(state);
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        event: RactorEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match event {
            RactorEvent::ActorTerminated(cell, _, _) => {
                state.runners.terminated(&cell);
            }
            RactorEvent::ActorFailed(cell, error) => {
                // A connection replaced meanwhile holds nothing in the core any more.
                let serving = state.runners.serves(cell.get_id());
                if let Some((key, _)) = state.runners.failed(&cell, error.to_string())
                    && serving
                {
                    // Its job is kept for the runner grace (a timer), and the pass may hand
                    // queued jobs to other connections: every effect is carried out, as for
                    // messages.
                    let effects = state
                        .core
                        .apply(DispatchInput::RunnerFailed(key), state.ctx.now());
                    for effect in effects {
                        carry_out(&myself, state, effect);
                    }
                    show_tool_slots(state);
                }
            }
            _ => {}
        }
        Ok(())
    }
}

fn carry_out(
    myself: &ActorRef<DispatcherMsg>,
    state: &mut DispatcherState,
    effect: DispatchEffect,
) {
    let grace = state.ctx.config.runner_grace;
    match effect {
        DispatchEffect::StopRunner(key) => {
            if let Some(actor) = state.runners.take(&key) {
                actor.stop(Some("runner disconnected".into()));
            }
        }
        DispatchEffect::Deliver { key, job } => {
            if let Some(actor) = state.runners.get(&key) {
                let _ = actor.send_message(RunnerMsg::Deliver(job));
            }
        }
        DispatchEffect::Cancel { key, job, reason } => {
            if let Some(actor) = state.runners.get(&key) {
                let notice =
                    Push::job_cancelled(&job.job_id, &job.execution_id, &job.step_id, &reason);
                let _ = actor.send_message(RunnerMsg::Notify(notice));
            }
        }
        DispatchEffect::TickAfter(delay) => {
            let timer = myself.send_after(delay, || DispatcherMsg::Tick);
            state.timers.keep(&timer);
        }
        DispatchEffect::ArmRunnerGrace {
            key: (runner_id, consumer_id),
            generation,
        } => {
            let timer = myself.send_after(grace, move || DispatcherMsg::RunnerGraceExpired {
                runner_id,
                consumer_id,
                generation,
            });
            state.timers.keep(&timer);
        }
        DispatchEffect::ArmRelease { job_id } => {
            let timer =
                myself.send_after(grace, move || DispatcherMsg::ReleaseRecovered { job_id });
            state.timers.keep(&timer);
        }
        DispatchEffect::RunnerCircuit(change) => {
            let open = state.core.runner_circuits_open();
            state.ctx.metrics.guardrails.runner_circuit(&change, open);
        }
        DispatchEffect::RunnerLost(job) => {
            let execution_id = crate::ids::ExecutionId::from(job.execution_id.as_str());
            if let Some(execution) = state.ctx.execution(&execution_id) {
                let _ = execution.send_message(crate::execution::ExecutionMsg::RunnerLost {
                    step_id: job.step_id,
                    job_id: job.job_id,
                });
            }
        }
    }
}

/// Rebuilds the runner breakers from the results of their horizon in the store (at start, and
/// when a reload changed the runner entries, which starts their state over). A store that
/// cannot answer is logged and the breakers start closed, as before.
async fn rebuild_runner_breakers(ctx: &Ctx, core: &mut Dispatch) {
    let gauge = &ctx.metrics.guardrails.runner_circuits_open;
    let Some(horizon) = core.runner_breakers.runner_horizon() else {
        gauge.set(0);
        return;
    };
    let now = ctx.now();
    let since = chrono::Duration::from_std(horizon)
        .ok()
        .and_then(|horizon| now.checked_sub_signed(horizon))
        .unwrap_or(chrono::DateTime::<chrono::Utc>::MIN_UTC);
    match ctx.store.runner_results_since(since).await {
        Ok(results) => {
            core.replay_runner_results(&results, now);
            let open = core.runner_circuits_open();
            tracing::info!(results = results.len(), open, since = %crate::time::format(&since), "runner circuit breakers rebuilt from the store");
            gauge.set(i64::try_from(open).unwrap_or(i64::MAX));
        }
        Err(error) => {
            tracing::error!(error = %error, "cannot read past runner results; runner circuit breakers start closed");
        }
    }
}

/// Returns the tool limits and the runner circuit breakers of the policy in force.
fn policy_guards(
    ctx: &Ctx,
) -> (
    crate::guardrails::concurrency::ToolLimits,
    crate::guardrails::breaker::BreakerSet,
) {
    let in_force = crate::kernel::context::read(&ctx.policy_in_force);
    let engine = &in_force.engine;
    (engine.tool_limits().clone(), engine.breakers().runners())
}

/// Updates the concurrency gauges of limited tool ids: those with jobs in hands or queued, and
/// back to 0 for those that had some (removed once the tool id has no limit).
fn show_tool_slots(state: &mut DispatcherState) {
    if state.shown.is_empty() && !state.core.has_tool_limits() {
        return;
    }
    let metrics = &state.ctx.metrics.guardrails;
    let slots = state.core.tool_slots();
    for (tool_id, slot) in &slots {
        metrics.concurrency(
            "tool",
            tool_id.as_str(),
            Some(slot.limit),
            slot.in_flight,
            slot.waiting,
        );
    }
    for tool_id in &state.shown {
        if !slots.contains_key(tool_id) {
            let limit = state.core.is_limited(tool_id).then_some(0);
            metrics.concurrency("tool", tool_id.as_str(), limit, 0, 0);
        }
    }
    state.shown = slots
        .into_keys()
        .chain(
            std::mem::take(&mut state.shown)
                .into_iter()
                .filter(|tool_id| state.core.is_limited(tool_id)),
        )
        .collect();
}
