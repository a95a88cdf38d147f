//! `AgentSupervisor`: spawns one `AgentGroupActor` per agent id on first use and restarts a
//! failed group (permanent). A restarted group reloads its pending executions from the store;
//! its consumers' streams end with the old group and the SDK reconnects at once.

use std::collections::HashMap;
use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent as RactorEvent};

use super::actor::{AgentGroupActor, AgentGroupArgs};
use super::messages::{AgentGroupMsg, AgentSupervisorMsg};
use crate::ids::AgentId;
use crate::kernel::context::{Ctx, read, write};
use crate::supervision::{self, ActorKind, RestartBudget, SupervisionEvent};

/// State of the agent supervisor.
pub struct AgentSupervisorState {
    ctx: Arc<Ctx>,
    ids: HashMap<ractor::ActorId, AgentId>,
    budgets: HashMap<AgentId, RestartBudget>,
}

/// The supervisor of agent groups.
pub struct AgentSupervisor;

impl Actor for AgentSupervisor {
    type Msg = AgentSupervisorMsg;
    type State = AgentSupervisorState;
    type Arguments = Arc<Ctx>;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        ctx: Arc<Ctx>,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(AgentSupervisorState {
            ctx,
            ids: HashMap::new(),
            budgets: HashMap::new(),
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
        write(&state.ctx.agent_groups).clear();
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            AgentSupervisorMsg::GetOrSpawn(agent_id, reply) => {
                let group = get_or_spawn(&myself, state, &agent_id).await;
                let _ = reply.send(group);
            }
            AgentSupervisorMsg::Forward(agent_id, message) => {
                if let Some(group) = get_or_spawn(&myself, state, &agent_id).await {
                    let _ = group.send_message(message);
                }
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
            RactorEvent::ActorTerminated(cell, _, _) => {
                if let Some(agent_id) = state.ids.remove(&cell.get_id()) {
                    write(&state.ctx.agent_groups).remove(&agent_id);
                }
            }
            RactorEvent::ActorFailed(cell, error) => {
                let Some(agent_id) = state.ids.remove(&cell.get_id()) else {
                    return Ok(());
                };
                write(&state.ctx.agent_groups).remove(&agent_id);
                let budget = state.budgets.entry(agent_id.clone()).or_default();
                let verdict = supervision::judge_failure(
                    &state.ctx.metrics,
                    ActorKind::AgentGroup,
                    Some(agent_id.as_str()),
                    budget,
                    error.to_string(),
                );
                if verdict.restart {
                    get_or_spawn(&myself, state, &agent_id).await;
                }
            }
            _ => {}
        }
        Ok(())
    }
}

async fn get_or_spawn(
    myself: &ActorRef<AgentSupervisorMsg>,
    state: &mut AgentSupervisorState,
    agent_id: &AgentId,
) -> Option<ActorRef<AgentGroupMsg>> {
    if let Some(group) = read(&state.ctx.agent_groups).get(agent_id).cloned() {
        return Some(group);
    }
    let args = AgentGroupArgs {
        ctx: state.ctx.clone(),
        agent_id: agent_id.clone(),
    };
    match Actor::spawn_linked(None, AgentGroupActor, args, myself.get_cell()).await {
        Ok((group, _)) => {
            state.ids.insert(group.get_id(), agent_id.clone());
            write(&state.ctx.agent_groups).insert(agent_id.clone(), group.clone());
            supervision::report(
                &state.ctx.metrics,
                ActorKind::AgentGroup,
                Some(agent_id.as_str()),
                &SupervisionEvent::Started,
            );
            Some(group)
        }
        Err(error) => {
            tracing::error!(agent.id = %agent_id, error = %error, "agent group could not start");
            None
        }
    }
}
