//! `ExecutionSupervisor`: owns the id → `ExecutionActor` map. It spawns new executions, rebuilds
//! passivated or crashed ones from the store through the same path, and past the restart limit
//! fails the execution with reason `crash_loop` instead of restarting it forever.

use std::collections::HashMap;
use std::sync::Arc;

use ractor::{
    Actor, ActorProcessingErr, ActorRef, ActorStatus, RpcReplyPort, SupervisionEvent as RactorEvent,
};

use super::actor::{ExecutionActor, ExecutionArgs, StartMode};
use super::messages::ExecutionMsg;
use super::rejection::Rejection;
use crate::ids::ExecutionId;
use crate::kernel::KernelError;
use crate::kernel::context::{Ctx, read, write};
use crate::supervision::{self, ActorKind, RestartBudget, SupervisionEvent};

/// Messages of the execution supervisor.
pub enum ExecutionSupervisorMsg {
    /// Spawns the actor of a new execution whose creation is already durable.
    Create {
        /// Its state after `execution.created`.
        state: Box<super::state::ExecutionState>,
        /// Answer: the live actor.
        reply: RpcReplyPort<Result<ActorRef<ExecutionMsg>, KernelError>>,
    },
    /// Returns the live actor of an execution, rebuilding it from the store if needed.
    Activate {
        /// Execution id.
        id: ExecutionId,
        /// Answer: the live actor (`ExecutionNotFound` when it has no events).
        reply: RpcReplyPort<Result<ActorRef<ExecutionMsg>, KernelError>>,
    },
}

/// State of the execution supervisor.
pub struct ExecutionSupervisorState {
    ctx: Arc<Ctx>,
    budgets: HashMap<ExecutionId, RestartBudget>,
    ids: HashMap<ractor::ActorId, ExecutionId>,
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
                let id = created.id.clone();
                let _ = reply.send(spawn(&myself, state, id, StartMode::Created(created)).await);
            }
            ExecutionSupervisorMsg::Activate { id, reply } => {
                let live = read(&state.ctx.executions)
                    .get(&id)
                    .cloned()
                    .filter(is_alive);
                let result = match live {
                    Some(actor) => Ok(actor),
                    None => spawn(&myself, state, id, StartMode::Rehydrate).await,
                };
                let _ = reply.send(result);
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
                if let Some(id) = state.ids.remove(&cell.get_id()) {
                    forget(state, &id, cell.get_id());
                    let reason = reason.unwrap_or_default();
                    supervision::report(
                        &state.ctx.metrics,
                        ActorKind::Execution,
                        Some(id.as_str()),
                        &SupervisionEvent::Stopped { reason },
                    );
                }
            }
            RactorEvent::ActorFailed(cell, error) => {
                let Some(id) = state.ids.remove(&cell.get_id()) else {
                    return Ok(());
                };
                forget(state, &id, cell.get_id());
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
                if let Err(error) = spawn(&myself, state, id.clone(), mode).await {
                    tracing::error!(execution.id = %id, error = %error, "execution actor could not be rebuilt");
                }
            }
            _ => {}
        }
        Ok(())
    }
}

fn is_alive(actor: &ActorRef<ExecutionMsg>) -> bool {
    matches!(
        actor.get_status(),
        ActorStatus::Running | ActorStatus::Starting | ActorStatus::Upgrading
    )
}

/// Removes a dead actor from the directory unless a newer one already replaced it.
fn forget(state: &ExecutionSupervisorState, id: &ExecutionId, actor_id: ractor::ActorId) {
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
            if is_alive(&actor) {
                write(&state.ctx.executions).insert(id.clone(), actor.clone());
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
