//! `ExecutionSupervisor`: owns the id → `ExecutionActor` map. It spawns new executions, rebuilds
//! passivated or crashed ones from the store through the same path, and past the restart limit
//! fails the execution with reason `crash_loop` instead of restarting it forever.

use std::collections::HashMap;
use std::sync::Arc;

use ractor::{
    Actor, ActorProcessingErr, ActorRef, ActorStatus, RpcReplyPort, SupervisionEvent as RactorEvent,
};

use super::actor::{ExecutionActor, ExecutionArgs, StartMode};
use super::messages::{ExecutionMsg, ExecutionSupervisorMsg};
use super::rejection::Rejection;
use crate::ids::ExecutionId;
use crate::kernel::KernelError;
use crate::kernel::context::{Ctx, write};
use crate::supervision::{self, ActorKind, RestartBudget, SupervisionEvent};
use crate::time::Timestamp;

use super::dormant::WakeIndex;

/// What the supervisor knows of one execution's actor.
enum Entry {
    /// Running; messages go to it.
    Live(ActorRef<ExecutionMsg>),
    /// Told to stop after its queued messages; activations wait for it to end.
    Draining {
        actor: ActorRef<ExecutionMsg>,
        wake_at: Option<Timestamp>,
        waiters: Vec<RpcReplyPort<Result<ActorRef<ExecutionMsg>, KernelError>>>,
    },
}

/// State of the execution supervisor.
pub struct ExecutionSupervisorState {
    ctx: Arc<Ctx>,
    budgets: HashMap<ExecutionId, RestartBudget>,
    ids: HashMap<ractor::ActorId, ExecutionId>,
    entries: HashMap<ExecutionId, Entry>,
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
        Ok(ExecutionSupervisorState {
            ctx,
            budgets: HashMap::new(),
            ids: HashMap::new(),
            entries: HashMap::new(),
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
        write(&state.ctx.executions).clear();
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
                match state.entries.get_mut(&id) {
                    Some(Entry::Live(actor)) if is_alive(actor) => {
                        let _ = reply.send(Ok(actor.clone()));
                    }
                    Some(Entry::Draining { waiters, .. }) => waiters.push(reply),
                    _ => {
                        let mode = StartMode::Created(created);
                        let _ = reply.send(spawn(&myself, state, id, mode).await);
                    }
                }
            }
            ExecutionSupervisorMsg::Activate {
                id,
                announce,
                reply,
            } => match state.entries.get_mut(&id) {
                Some(Entry::Live(actor)) if is_alive(actor) => {
                    let _ = reply.send(Ok(actor.clone()));
                }
                Some(Entry::Draining { waiters, .. }) => waiters.push(reply),
                _ => {
                    let mode = if announce {
                        StartMode::Rehydrate
                    } else {
                        StartMode::Wake
                    };
                    let _ = reply.send(spawn(&myself, state, id, mode).await);
                }
            },
            ExecutionSupervisorMsg::Idle {
                id,
                actor,
                epoch,
                wake_at,
            } => {
                let Some(Entry::Live(live)) = state.entries.get(&id) else {
                    return Ok(());
                };
                if live.get_id() != actor {
                    return Ok(());
                }
                let live = live.clone();
                forget(state, &id, actor);
                if live.send_message(ExecutionMsg::Passivate { epoch }).is_ok() {
                    state.entries.insert(
                        id,
                        Entry::Draining {
                            actor: live,
                            wake_at,
                            waiters: Vec::new(),
                        },
                    );
                }
            }
            ExecutionSupervisorMsg::StillBusy { id, actor } => {
                if let Some(Entry::Draining {
                    actor: draining, ..
                }) = state.entries.get(&id)
                    && draining.get_id() == actor
                    && let Some(Entry::Draining {
                        actor: draining,
                        waiters,
                        ..
                    }) = state.entries.remove(&id)
                {
                    for waiter in waiters {
                        let _ = waiter.send(Ok(draining.clone()));
                    }
                    write(&state.ctx.executions).insert(id.clone(), draining.clone());
                    state.entries.insert(id, Entry::Live(draining));
                }
            }
            ExecutionSupervisorMsg::Dormant(found) => {
                for (id, wake_at) in found {
                    if let Some(at) = wake_at
                        && !state.entries.contains_key(&id)
                    {
                        state.wakes.insert(id, at);
                    }
                }
                state
                    .ctx
                    .metrics
                    .executions_dormant
                    .set(state.wakes.len() as i64);
                arm_wake(&myself, state);
            }
            ExecutionSupervisorMsg::WakeDue => {
                state.wake_armed = None;
                let due = state.wakes.take_due(state.ctx.now());
                for id in due {
                    if state.entries.contains_key(&id) {
                        continue;
                    }
                    // The deadline is the only timer of a waiting execution; the message also
                    // makes an execution that ended meanwhile stop again at once.
                    match spawn(&myself, state, id.clone(), StartMode::Wake).await {
                        Ok(actor) => {
                            let _ = actor.send_message(ExecutionMsg::ExecutionDeadlineReached);
                        }
                        Err(error) => {
                            tracing::warn!(execution.id = %id, error = %error, "passivated execution could not be woken");
                        }
                    }
                }
                state
                    .ctx
                    .metrics
                    .executions_dormant
                    .set(state.wakes.len() as i64);
                arm_wake(&myself, state);
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
                let Some(id) = state.ids.remove(&cell.get_id()) else {
                    return Ok(());
                };
                forget(state, &id, cell.get_id());
                let reason = reason.unwrap_or_default();
                let waiters = match state.entries.remove(&id) {
                    Some(Entry::Draining {
                        actor,
                        wake_at,
                        waiters,
                    }) if actor.get_id() == cell.get_id() => {
                        state.ctx.metrics.passivations.inc();
                        if let Some(at) = wake_at {
                            state.wakes.insert(id.clone(), at);
                        }
                        waiters
                    }
                    Some(other) => {
                        state.entries.insert(id.clone(), other);
                        Vec::new()
                    }
                    None => Vec::new(),
                };
                supervision::report(
                    &state.ctx.metrics,
                    ActorKind::Execution,
                    Some(id.as_str()),
                    &SupervisionEvent::Stopped { reason },
                );
                if !waiters.is_empty() {
                    let result = spawn(&myself, state, id.clone(), StartMode::Wake).await;
                    for waiter in waiters {
                        let _ = waiter.send(match &result {
                            Ok(actor) => Ok(actor.clone()),
                            Err(error) => Err(error.clone()),
                        });
                    }
                }
                state
                    .ctx
                    .metrics
                    .executions_dormant
                    .set(state.wakes.len() as i64);
                arm_wake(&myself, state);
            }
            RactorEvent::ActorFailed(cell, error) => {
                let Some(id) = state.ids.remove(&cell.get_id()) else {
                    return Ok(());
                };
                forget(state, &id, cell.get_id());
                let waiters = match state.entries.remove(&id) {
                    Some(Entry::Draining { waiters, .. }) => waiters,
                    _ => Vec::new(),
                };
                let budget = state.budgets.entry(id.clone()).or_default();
                let verdict = supervision::judge_failure(
                    &state.ctx.metrics,
                    ActorKind::Execution,
                    Some(id.as_str()),
                    budget,
                    error.to_string(),
                );
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

fn is_alive(actor: &ActorRef<ExecutionMsg>) -> bool {
    matches!(
        actor.get_status(),
        ActorStatus::Running | ActorStatus::Starting | ActorStatus::Upgrading
    )
}

/// Removes an actor from the shared directory unless a newer one already replaced it.
fn forget(state: &mut ExecutionSupervisorState, id: &ExecutionId, actor_id: ractor::ActorId) {
    if let Some(Entry::Live(actor)) = state.entries.get(id)
        && actor.get_id() == actor_id
    {
        state.entries.remove(id);
    }
    let mut executions = write(&state.ctx.executions);
    if executions
        .get(id)
        .is_some_and(|actor| actor.get_id() == actor_id)
    {
        executions.remove(id);
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
    match Actor::spawn_linked(None, ExecutionActor, args, myself.get_cell()).await {
        Ok((actor, _handle)) => {
            state.ids.insert(actor.get_id(), id.clone());
            state.wakes.remove(&id);
            if is_alive(&actor) {
                write(&state.ctx.executions).insert(id.clone(), actor.clone());
                state.entries.insert(id.clone(), Entry::Live(actor.clone()));
            }
            supervision::report(
                &state.ctx.metrics,
                ActorKind::Execution,
                Some(id.as_str()),
                &SupervisionEvent::Started,
            );
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
