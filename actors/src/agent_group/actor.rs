//! `AgentGroupActor`: the actor shell around [`Group`], the pure core holding the consumers of
//! one agent id. The shell decodes messages into core transitions and carries out their
//! effects: timers, offers to executions (each in its own task, answered as `OfferAnswered`,
//! so the group keeps serving its mailbox while executions commit), lost-consumer notices,
//! and the kernel-wide set of lost consumers. Creators waiting for the first assignment
//! attempt of their execution are answered here.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio::sync::mpsc;

use super::core::{Group, GroupEffect, OfferOutcome};
use super::messages::AgentGroupMsg;
use crate::execution::{ExecutionMsg, Rejection};
use crate::guardrails::concurrency::{LabelSet, RunningLimits};
use crate::ids::{AgentId, ConsumerId, ExecutionId};
use crate::kernel::KernelError;
use crate::kernel::context::Ctx;
use crate::push::Push;
use crate::time::PendingTimers;

/// Delay before pending executions are offered again after a failed assignment attempt (for
/// example a commit refused during a database outage).
const ASSIGNMENT_RETRY: Duration = Duration::from_millis(500);

/// Arguments of an agent group.
pub struct AgentGroupArgs {
    /// Shared context.
    pub ctx: Arc<Ctx>,
    /// Agent id.
    pub agent_id: AgentId,
}

/// State of an agent group.
pub struct AgentGroupState {
    ctx: Arc<Ctx>,
    agent_id: AgentId,
    core: Group<mpsc::Sender<Push>>,
    /// Creators waiting for the first assignment attempt of their execution.
    waiting: HashMap<ExecutionId, RpcReplyPort<()>>,
    /// Grace and retry timers, aborted when the group stops.
    timers: PendingTimers,
    /// The agent's concurrency gauges are shown (it had a limit).
    slots_shown: bool,
    /// The `scope="label"` gauge ids shown (`<agent id>/<label key>`).
    labels_shown: Vec<String>,
}

/// The actor of one agent id.
pub struct AgentGroupActor;

impl Actor for AgentGroupActor {
    type Msg = AgentGroupMsg;
    type State = AgentGroupState;
    type Arguments = AgentGroupArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: AgentGroupArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let core = Group::new(args.agent_id.clone(), args.ctx.config.agent_grace);
        Ok(AgentGroupState {
            ctx: args.ctx,
            agent_id: args.agent_id,
            core,
            waiting: HashMap::new(),
            timers: PendingTimers::default(),
            slots_shown: false,
            labels_shown: Vec::new(),
        })
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.timers.abort_all();
        Ok(())
    }

    async fn post_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // A (re)started group learns its pending executions from the store, so nothing waits
        // forever because a queue was lost with a crashed predecessor (or passivated, or never
        // woken after a restart: a pending execution is only a row until a consumer takes it).
        // Oldest first, each with the priority of its `execution.created`.
        match state.ctx.store.pending_queue(&state.agent_id).await {
            Ok(found) => state.core.load_pending(
                found
                    .into_iter()
                    .map(|entry| (entry.id, entry.priority, entry.labels.map(LabelSet::from))),
            ),
            Err(error) => {
                tracing::warn!(agent.id = %state.agent_id, error = %error, "could not load pending executions");
            }
        }
        // Executions assigned before this group started (a kernel restart, a crashed
        // predecessor) hold their running slots until their sessions end.
        match state.ctx.store.running_executions(&state.agent_id).await {
            Ok(running) => state.core.load_running(
                running
                    .into_iter()
                    .map(|entry| (entry.id, entry.labels.map(LabelSet::from))),
            ),
            Err(error) => {
                tracing::warn!(agent.id = %state.agent_id, error = %error, "could not load running executions; concurrency limits count only new assignments");
            }
        }
        let limits = running_limits(&state.ctx, &state.agent_id);
        state.core.set_running_limits(limits);
        show_slots(state);
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let now = tokio::time::Instant::now();
        let effects = match message {
            AgentGroupMsg::ConsumerConnected {
                consumer_id,
                connection,
                sender,
            } => state.core.connect(consumer_id, connection, sender, now),
            AgentGroupMsg::ConsumerDisconnected {
                consumer_id,
                connection,
            } => state.core.disconnect(&consumer_id, connection),
            AgentGroupMsg::GraceExpired {
                consumer_id,
                generation,
            } => state.core.grace_expired(&consumer_id, generation),
            AgentGroupMsg::ExecutionPending {
                execution_id,
                priority,
                labels,
                reply,
            } => {
                let effects = state
                    .core
                    .execution_pending(execution_id.clone(), priority, labels);
                if let Some(reply) = reply {
                    // Answered when its offer is answered, or now if it is not being offered.
                    if state.core.is_offering(&execution_id) {
                        state.waiting.insert(execution_id, reply);
                    } else {
                        let _ = reply.send(());
                    }
                }
                effects
            }
            AgentGroupMsg::OfferAnswered {
                execution_id,
                consumer_id,
                result,
            } => {
                if let Some(reply) = state.waiting.remove(&execution_id) {
                    let _ = reply.send(());
                }
                let outcome = match result {
                    Ok(push) => OfferOutcome::Assigned(push),
                    Err(KernelError::Rejected(
                        Rejection::NotPending(_) | Rejection::ExecutionNotFound(_),
                    )) => OfferOutcome::Gone,
                    Err(error) => OfferOutcome::Failed(error.to_string()),
                };
                state
                    .core
                    .offer_answered(execution_id, consumer_id, outcome, now)
            }
            AgentGroupMsg::SessionRestored {
                consumer_id,
                execution_id,
                labels,
            } => state
                .core
                .session_restored(consumer_id, execution_id, labels),
            AgentGroupMsg::SessionEnded {
                consumer_id,
                execution_id,
            } => state.core.session_ended(&consumer_id, &execution_id),
            AgentGroupMsg::PolicyReplaced => {
                let limits = running_limits(&state.ctx, &state.agent_id);
                state.core.set_running_limits(limits)
            }
            AgentGroupMsg::RetryAssignment => state.core.retry(),
            AgentGroupMsg::ReloadPending => {
                match state.ctx.store.pending_queue(&state.agent_id).await {
                    Ok(found) => {
                        state.core.load_pending(found.into_iter().map(|entry| {
                            (entry.id, entry.priority, entry.labels.map(LabelSet::from))
                        }));
                        state.core.retry()
                    }
                    Err(error) => {
                        tracing::warn!(agent.id = %state.agent_id, error = %error, "could not load pending executions");
                        Vec::new()
                    }
                }
            }
            AgentGroupMsg::Push { consumer_id, push } => state.core.push(&consumer_id, push, now),
            AgentGroupMsg::Observe(reply) => {
                let _ = reply.send(state.core.snapshot());
                Vec::new()
            }
        };
        for effect in effects {
            carry_out(&myself, state, effect);
        }
        show_slots(state);
        Ok(())
    }
}

/// Returns the agent's `concurrency.max_running` and `concurrency.labels` in the policy in force.
fn running_limits(ctx: &Ctx, agent_id: &AgentId) -> RunningLimits {
    let in_force = crate::kernel::context::read(&ctx.policy_in_force);
    RunningLimits {
        max_running: in_force.engine.max_running(agent_id),
        labels: in_force.engine.label_limits(agent_id),
    }
}

/// Updates the agent's concurrency gauges (present only while it has a limit): `scope="agent"`
/// for `max_running`, `scope="label"` with `id="<agent id>/<label key>"` per limited label key
/// (all its values together: label values never become series). Without a limit nothing is
/// touched (once the series of a removed limit are gone).
fn show_slots(state: &mut AgentGroupState) {
    let (limit, used, waiting) = state.core.running_slots();
    let metrics = &state.ctx.metrics.guardrails;
    if limit.is_some() || state.slots_shown {
        state.slots_shown = limit.is_some();
        metrics.concurrency("agent", state.agent_id.as_str(), limit, used, waiting);
    }
    let labels = state.core.label_slots();
    if labels.is_empty() && state.labels_shown.is_empty() {
        return;
    }
    let shown = std::mem::take(&mut state.labels_shown);
    for (used, held_back) in labels {
        let id = format!("{}/{}", state.agent_id, used.label);
        metrics.concurrency("label", &id, Some(used.limit), used.in_use, held_back);
        state.labels_shown.push(id);
    }
    for id in shown {
        if !state.labels_shown.contains(&id) {
            metrics.concurrency("label", &id, None, 0, 0);
        }
    }
}

fn carry_out(myself: &ActorRef<AgentGroupMsg>, state: &mut AgentGroupState, effect: GroupEffect) {
    let lost_key = |consumer_id: &ConsumerId| (state.agent_id.clone(), consumer_id.clone());
    match effect {
        GroupEffect::ArmGrace {
            consumer_id,
            generation,
        } => {
            let timer = myself.send_after(state.ctx.config.agent_grace, move || {
                AgentGroupMsg::GraceExpired {
                    consumer_id,
                    generation,
                }
            });
            state.timers.keep(&timer);
        }
        GroupEffect::ConsumerLost(consumer_id) => {
            crate::kernel::context::write(&state.ctx.lost_consumers).insert(lost_key(&consumer_id));
        }
        GroupEffect::ConsumerBack(consumer_id) => {
            crate::kernel::context::write(&state.ctx.lost_consumers)
                .remove(&lost_key(&consumer_id));
        }
        GroupEffect::TellLost {
            execution_id,
            consumer_id,
            reason,
        } => {
            // Off the group's mailbox, since rebuilding a passivated execution waits for the
            // store.
            let ctx = state.ctx.clone();
            tokio::spawn(async move {
                let message = |ack| ExecutionMsg::ConsumerLost {
                    consumer_id: consumer_id.clone(),
                    reason: reason.as_str().to_owned(),
                    ack: Some(ack),
                };
                if let Err(error) = ctx.ask_execution(&execution_id, message).await {
                    tracing::warn!(execution.id = %execution_id, error = %error, "lost consumer could not be reported to its execution");
                }
            });
        }
        GroupEffect::Offer {
            execution_id,
            consumer_id,
        } => {
            let ctx = state.ctx.clone();
            let group = myself.clone();
            tokio::spawn(async move {
                // Cluster mode: an execution another kernel owns is matched there.
                if ctx
                    .config
                    .owns
                    .as_ref()
                    .is_some_and(|owns| !owns(&execution_id))
                {
                    let _ = group.send_message(AgentGroupMsg::OfferAnswered {
                        result: Err(KernelError::Rejected(Rejection::NotPending(format!(
                            "execution {execution_id} is owned by another kernel"
                        )))),
                        execution_id,
                        consumer_id,
                    });
                    return;
                }
                let offer = |reply| ExecutionMsg::OfferToConsumer {
                    consumer_id: consumer_id.clone(),
                    reply,
                };
                let result = match ctx.ask_execution(&execution_id, offer).await {
                    Ok(answer) => answer,
                    Err(error) => Err(error),
                };
                let _ = group.send_message(AgentGroupMsg::OfferAnswered {
                    execution_id,
                    consumer_id,
                    result,
                });
            });
        }
        GroupEffect::ArmRetry => {
            let timer = myself.send_after(ASSIGNMENT_RETRY, || AgentGroupMsg::RetryAssignment);
            state.timers.keep(&timer);
        }
        GroupEffect::SlowConsumer => {
            let kind = crate::metrics::KindLabel {
                kind: "agent".to_owned(),
            };
            state.ctx.metrics.slow_consumers.get_or_create(&kind).inc();
        }
    }
}
