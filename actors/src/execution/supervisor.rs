//! `ExecutionSupervisor`: owns the execution actors, by execution id. It spawns new executions,
//! rebuilds passivated or crashed ones from the store through the same path, and past the
//! restart limit fails the execution with reason `crash_loop` instead of restarting it forever.
//! Which actor serves which id, and the restart budgets, are kept by a [`Keyed`]; this file
//! adds what is particular to executions: passivation (an idle actor drains, then stops, and
//! activations that arrive meanwhile wait for it) and the wake-ups of passivated executions.

use std::collections::HashMap;
use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent as RactorEvent};

use super::actor::{ExecutionActor, ExecutionArgs, StartMode};
use super::dormant::WakeIndex;
use super::messages::{ExecutionMsg, ExecutionSupervisorMsg};
use super::rejection::Rejection;
use crate::ids::ExecutionId;
use crate::kernel::KernelError;
use crate::kernel::context::Ctx;
use crate::supervision::{self, ActorKind, Keyed, SupervisionEvent};
use crate::time::Timestamp;

type ActivationReply = RpcReplyPort<Result<ActorRef<ExecutionMsg>, KernelError>>;

/// An actor told to stop after its queued messages; activations wait for it to end.
struct Draining {
    actor: ActorRef<ExecutionMsg>,
    wake_at: Option<Timestamp>,
    waiters: Vec<ActivationReply>,
}

/// State of the execution supervisor.
pub struct ExecutionSupervisorState {
    ctx: Arc<Ctx>,
    children: Keyed<ExecutionId, ExecutionMsg>,
    draining: HashMap<ExecutionId, Draining>,
    /// Actors stopped because their execution moved to another kernel: never restarted.
    released: std::collections::HashSet<ractor::ActorId>,
    wakes: WakeIndex,
    /// Time the pending `WakeDue` was armed for.
    wake_armed: Option<Timestamp>,
    /// Its timer, aborted when an earlier one replaces it and when the supervisor stops.
    wake_timer:
        Option<tokio::task::JoinHandle<Result<(), ractor::MessagingErr<ExecutionSupervisorMsg>>>>,
}

/// The supervisor of execution actors.
pub struct ExecutionSupervisor;

impl Actor for ExecutionSupervisor {
    type Msg = ExecutionSupervisorMsg;
    type State = ExecutionSupervisorState;
    type Arguments = Arc<Ctx>;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        ctx: Arc<Ctx>,
    ) -> Result<Self::State, ActorProcessingErr> {
        let children = Keyed::new(ActorKind::Execution, ctx.metrics.clone())
            .publishing(ctx.executions.clone());
        Ok(ExecutionSupervisorState {
            ctx,
            children,
            draining: HashMap::new(),
            released: std::collections::HashSet::new(),
            wakes: WakeIndex::default(),
            wake_armed: None,
            wake_timer: None,
        })
    }

    async fn post_stop(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        myself
            .stop_children_and_wait(
                Some("kernel shutdown".into()),
                Some(state.ctx.config.shutdown_timeout),
            )
            .await;
        state.children.clear();
        if let Some(timer) = state.wake_timer.take() {
            timer.abort();
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            ExecutionSupervisorMsg::Create {
                state: created,
                reply,
            } => {
                // The creation is committed before this message arrives, so its agent group may
                // have found it in the store and woken an actor for it already (a group that
                // started meanwhile loads its pending executions). That actor is the execution:
                // a second one would own a copy that misses what the first one commits.
                let id = created.id.clone();
                if let Some(reply) = answer_if_known(state, &id, reply) {
                    let mode = StartMode::Created(created);
                    let _ = reply.send(spawn(&myself, state, id, mode).await);
                }
            }
            ExecutionSupervisorMsg::Activate {
                id,
                announce,
                reply,
            } => {
                if let Some(reply) = answer_if_known(state, &id, reply) {
                    let mode = if announce {
                        StartMode::Rehydrate
                    } else {
                        StartMode::Wake
                    };
                    let _ = reply.send(spawn(&myself, state, id, mode).await);
                }
            }
            ExecutionSupervisorMsg::Idle {
                id,
                actor,
                epoch,
                wake_at,
            } => {
                if state.children.get(&id).map(|live| live.get_id()) != Some(actor) {
                    return Ok(());
                }
                if let Some(live) = state.children.take(&id)
                    && live.send_message(ExecutionMsg::Passivate { epoch }).is_ok()
                {
                    let draining = Draining {
                        actor: live,
                        wake_at,
                        waiters: Vec::new(),
                    };
                    state.draining.insert(id, draining);
                }
            }
            ExecutionSupervisorMsg::StillBusy { id, actor } => {
                if state.draining.get(&id).map(|d| d.actor.get_id()) == Some(actor)
                    && let Some(draining) = state.draining.remove(&id)
                {
                    for waiter in draining.waiters {
                        let _ = waiter.send(Ok(draining.actor.clone()));
                    }
                    state.children.admit(id, draining.actor);
                }
            }
            ExecutionSupervisorMsg::Dormant(found) => {
                for (id, wake_at) in found {
                    if let Some(at) = wake_at
                        && !known(state, &id)
                    {
                        state.wakes.insert(id, at);
                    }
                }
                show_dormant(state);
                arm_wake(&myself, state);
            }
            ExecutionSupervisorMsg::WakeDue => {
                state.wake_armed = None;
                let due = state.wakes.take_due(state.ctx.now());
                for id in due {
                    if known(state, &id) {
                        continue;
                    }
                    // The deadline is the only timer of a waiting execution: the rebuilt actor's
                    // wake-up enforces it. The message also makes an execution that ended
                    // meanwhile stop again at once.
                    match spawn(&myself, state, id.clone(), StartMode::Wake).await {
                        Ok(actor) => {
                            let _ = actor.send_message(ExecutionMsg::Wake);
                        }
                        Err(error) => {
                            tracing::warn!(execution.id = %id, error = %error, "passivated execution could not be woken");
                        }
                    }
                }
                show_dormant(state);
                arm_wake(&myself, state);
            }
            ExecutionSupervisorMsg::Release { matches, reply } => {
                let _ = reply.send(Ok(release(state, matches.as_ref())));
                show_dormant(state);
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        event: RactorEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match event {
            RactorEvent::ActorTerminated(cell, _, reason) => {
                state.released.remove(&cell.get_id());
                let Some(id) = state.children.terminated(&cell) else {
                    return Ok(());
                };
                let mut waiters = Vec::new();
                if state.draining.get(&id).map(|d| d.actor.get_id()) == Some(cell.get_id())
                    && let Some(draining) = state.draining.remove(&id)
                {
                    state.ctx.metrics.passivations.inc();
                    if let Some(at) = draining.wake_at {
                        state.wakes.insert(id.clone(), at);
                    }
                    waiters = draining.waiters;
                }
                supervision::report(
                    &state.ctx.metrics,
                    ActorKind::Execution,
                    Some(id.as_str()),
                    &SupervisionEvent::Stopped {
                        reason: reason.unwrap_or_default(),
                    },
                );
                if !waiters.is_empty() {
                    let result = spawn(&myself, state, id.clone(), StartMode::Wake).await;
                    for waiter in waiters {
                        let _ = waiter.send(result.clone());
                    }
                }
                show_dormant(state);
                arm_wake(&myself, state);
            }
            RactorEvent::ActorFailed(cell, error) => {
                if state.released.remove(&cell.get_id()) {
                    state.children.terminated(&cell);
                    return Ok(());
                }
                let Some((id, verdict)) = state.children.failed(&cell, error.to_string()) else {
                    return Ok(());
                };
                let waiters = state
                    .draining
                    .remove(&id)
                    .map(|draining| draining.waiters)
                    .unwrap_or_default();
                let mode = if verdict.restart {
                    StartMode::Rehydrate
                } else {
                    let window = supervision::restart_policy(ActorKind::Execution).window;
                    let reason = format!(
                        "crash_loop: execution actor failed {} times within {window:?}",
                        verdict.count
                    );
                    StartMode::GiveUp { error: reason }
                };
                let result = spawn(&myself, state, id.clone(), mode).await;
                if let Err(error) = &result {
                    tracing::error!(execution.id = %id, error = %error, "execution actor could not be rebuilt");
                }
                for waiter in waiters {
                    let _ = waiter.send(result.clone());
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// Answers an activation at once when the execution has a running actor, or queues it behind
/// one that is draining; otherwise gives the reply back (an actor has to be started).
fn answer_if_known(
    state: &mut ExecutionSupervisorState,
    id: &ExecutionId,
    reply: ActivationReply,
) -> Option<ActivationReply> {
    if let Some(actor) = state.children.get(id) {
        let _ = reply.send(Ok(actor.clone()));
        None
    } else if let Some(draining) = state.draining.get_mut(id) {
        draining.waiters.push(reply);
        None
    } else {
        Some(reply)
    }
}

/// Stops the actors of the executions `matches` selects without a write (their end is then
/// only forgotten, never turned into a wake-up or a restart), answers activations waiting for
/// a draining one as unavailable and drops their wake-ups; returns how many actors stopped.
fn release(state: &mut ExecutionSupervisorState, matches: &dyn Fn(&ExecutionId) -> bool) -> usize {
    let mut stopped = 0;
    for id in state.children.keys() {
        if matches(&id)
            && let Some(actor) = state.children.take(&id)
        {
            state.released.insert(actor.get_id());
            actor.stop(Some("partition moved to another kernel".into()));
            stopped += 1;
        }
    }
    let draining: Vec<ExecutionId> = state
        .draining
        .keys()
        .filter(|id| matches(id))
        .cloned()
        .collect();
    for id in draining {
        if let Some(draining) = state.draining.remove(&id) {
            state.released.insert(draining.actor.get_id());
            draining
                .actor
                .stop(Some("partition moved to another kernel".into()));
            stopped += 1;
            for waiter in draining.waiters {
                let _ = waiter.send(Err(KernelError::Unavailable(format!(
                    "execution {id} moved to another kernel"
                ))));
            }
        }
    }
    state.wakes.remove_matching(matches);
    stopped
}

/// Returns whether an execution has an actor, live or draining.
fn known(state: &ExecutionSupervisorState, id: &ExecutionId) -> bool {
    state.children.contains(id) || state.draining.contains_key(id)
}

fn show_dormant(state: &ExecutionSupervisorState) {
    let dormant = i64::try_from(state.wakes.len()).unwrap_or(i64::MAX);
    state.ctx.metrics.executions_dormant.set(dormant);
}

/// Arms one `WakeDue` for the earliest wake-up time, unless one is armed for that time or
/// earlier already.
fn arm_wake(myself: &ActorRef<ExecutionSupervisorMsg>, state: &mut ExecutionSupervisorState) {
    let Some(next) = state.wakes.next() else {
        return;
    };
    if state.wake_armed.is_some_and(|armed| armed <= next) {
        return;
    }
    state.wake_armed = Some(next);
    let delay = (next - state.ctx.now()).to_std().unwrap_or_default();
    let timer = myself.send_after(delay, || ExecutionSupervisorMsg::WakeDue);
    if let Some(replaced) = state.wake_timer.replace(timer) {
        replaced.abort();
    }
}

async fn spawn(
    myself: &ActorRef<ExecutionSupervisorMsg>,
    state: &mut ExecutionSupervisorState,
    id: ExecutionId,
    mode: StartMode,
) -> Result<ActorRef<ExecutionMsg>, KernelError> {
    let args = ExecutionArgs {
        ctx: state.ctx.clone(),
        id: id.clone(),
        mode,
    };
    let spawned = state
        .children
        .spawn(&myself.get_cell(), id.clone(), ExecutionActor, args)
        .await;
    match spawned {
        Ok(actor) => {
            state.wakes.remove(&id);
            Ok(actor)
        }
        Err(error) => Err(spawn_error(&id, &error.to_string())),
    }
}

/// Recovers the domain error from a failed `pre_start` (ractor only keeps its text).
fn spawn_error(id: &ExecutionId, text: &str) -> KernelError {
    if text.contains("not found: execution") {
        KernelError::Rejected(Rejection::ExecutionNotFound(id.to_string()))
    } else if text.contains("store unavailable") || text.contains("not running") {
        KernelError::Unavailable(format!("execution {id} could not start: store unavailable"))
    } else {
        KernelError::Unavailable(format!("execution {id} could not start: {text}"))
    }
}
