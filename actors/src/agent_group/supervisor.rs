//! `AgentSupervisor`: spawns one `AgentGroupActor` per agent id on first use and restarts a
//! failed group (permanent). A restarted group reloads its pending executions from the store;
//! its consumers' streams end with the old group and the SDK reconnects at once.

use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent as RactorEvent};

use super::actor::{AgentGroupActor, AgentGroupArgs};
use super::messages::{AgentGroupMsg, AgentSupervisorMsg};
use crate::ids::AgentId;
use crate::kernel::context::Ctx;
use crate::supervision::{ActorKind, Keyed};

/// State of the agent supervisor.
pub struct AgentSupervisorState {
    ctx: Arc<Ctx>,
    groups: Keyed<AgentId, AgentGroupMsg>,
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
        let groups = Keyed::new(ActorKind::AgentGroup, ctx.metrics.clone())
            .publishing(ctx.agent_groups.clone());
        Ok(AgentSupervisorState { ctx, groups })
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
        state.groups.clear();
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
                state.groups.terminated(&cell);
            }
            RactorEvent::ActorFailed(cell, error) => {
                if let Some((agent_id, verdict)) = state.groups.failed(&cell, error.to_string())
                    && verdict.restart
                {
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
    if let Some(group) = state.groups.get(agent_id) {
        return Some(group.clone());
    }
    let args = AgentGroupArgs {
        ctx: state.ctx.clone(),
        agent_id: agent_id.clone(),
    };
    let spawned = state
        .groups
        .spawn(&myself.get_cell(), agent_id.clone(), AgentGroupActor, args)
        .await;
    match spawned {
        Ok(group) => Some(group),
        Err(error) => {
            tracing::error!(agent.id = %agent_id, error = %error, "agent group could not start");
            None
        }
    }
}
