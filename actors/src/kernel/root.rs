//! `KernelSupervisor`: the root of the tree. It starts the store writer, the policy actor, the
//! dispatcher and the two supervisors, restarts the singletons (permanent, within their limit)
//! and stops everything top-down on shutdown.

use std::collections::HashMap;
use std::sync::Arc;

use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, SupervisionEvent as RactorEvent};

use super::context::{Ctx, write};
use crate::agent_group::AgentSupervisor;
use crate::execution::ExecutionSupervisor;
use crate::policy::{PolicyActor, PolicyArgs};
use crate::runner::Dispatcher;
use crate::store_writer::{StoreWriter, StoreWriterArgs};
use crate::supervision::{self, ActorKind, RestartBudget, SupervisionEvent};

/// Arguments of the root supervisor.
pub struct RootArgs {
    /// Shared context.
    pub ctx: Arc<Ctx>,
    /// Signalled once every child is started (the execution supervisor is then in
    /// `Ctx::singletons`).
    pub ready: tokio::sync::oneshot::Sender<()>,
}

/// State of the root supervisor.
pub struct RootState {
    ctx: Arc<Ctx>,
    kinds: HashMap<ractor::ActorId, ActorKind>,
    budgets: HashMap<ActorKind, RestartBudget>,
}

/// The root supervisor.
pub struct KernelSupervisor;

impl Actor for KernelSupervisor {
    type Msg = ();
    type State = RootState;
    type Arguments = RootArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<()>,
        args: RootArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let mut state = RootState {
            ctx: args.ctx,
            kinds: HashMap::new(),
            budgets: HashMap::new(),
        };
        for kind in [
            ActorKind::StoreWriter,
            ActorKind::Policy,
            ActorKind::Dispatcher,
            ActorKind::AgentSupervisor,
        ] {
            spawn_singleton(&myself, &mut state, kind).await?;
        }
        let (executions, _) = Actor::spawn_linked(
            None,
            ExecutionSupervisor,
            state.ctx.clone(),
            myself.get_cell(),
        )
        .await?;
        state
            .kinds
            .insert(executions.get_id(), ActorKind::ExecutionSupervisor);
        write(&state.ctx.singletons).executions = Some(executions);
        let _ = args.ready.send(());
        Ok(state)
    }

    async fn post_stop(
        &self,
        myself: ActorRef<()>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let timeout = Some(state.ctx.config.shutdown_timeout);
        // Stop the consumers of the store first, the store writer last, so in-flight commits finish.
        let children = myself.get_children();
        let (writers, others): (Vec<ActorCell>, Vec<ActorCell>) = children
            .into_iter()
            .partition(|child| state.kinds.get(&child.get_id()) == Some(&ActorKind::StoreWriter));
        for child in others {
            let _ = child
                .stop_and_wait(Some("kernel shutdown".into()), timeout)
                .await;
        }
        for child in writers {
            let _ = child
                .stop_and_wait(Some("kernel shutdown".into()), timeout)
                .await;
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<()>,
        event: RactorEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if let RactorEvent::ActorFailed(cell, error) = event {
            let Some(kind) = state.kinds.remove(&cell.get_id()) else {
                return Ok(());
            };
            let error = error.to_string();
            let budget = state.budgets.entry(kind).or_default();
            let verdict =
                supervision::judge_failure(&state.ctx.metrics, kind, None, budget, error.clone());
            if !verdict.restart {
                return Err(
                    format!("{} failed past its restart limit: {error}", kind.as_str()).into(),
                );
            }
            spawn_singleton(&myself, state, kind).await?;
        }
        Ok(())
    }
}

async fn spawn_singleton(
    myself: &ActorRef<()>,
    state: &mut RootState,
    kind: ActorKind,
) -> Result<(), ActorProcessingErr> {
    let ctx = state.ctx.clone();
    let supervisor = myself.get_cell();
    let id = match kind {
        ActorKind::StoreWriter => {
            let args = StoreWriterArgs {
                store: ctx.store.clone(),
                metrics: ctx.metrics.clone(),
                commits: ctx.commits.clone(),
                max_batch: ctx.config.max_batch,
                traced: ctx.config.traces.is_some(),
            };
            let (actor, _) = Actor::spawn_linked(None, StoreWriter, args, supervisor).await?;
            let id = actor.get_id();
            write(&ctx.singletons).writer = Some(actor);
            id
        }
        ActorKind::Policy => {
            let policy = super::context::read(&ctx.policy_in_force).clone();
            let args = PolicyArgs {
                engine: policy.engine,
                hooks: policy.hooks,
                metrics: ctx.metrics.clone(),
                store: ctx.store.clone(),
                clock: ctx.config.clock.clone(),
            };
            let (actor, _) = Actor::spawn_linked(None, PolicyActor, args, supervisor).await?;
            let id = actor.get_id();
            write(&ctx.singletons).policy = Some(actor);
            id
        }
        ActorKind::Dispatcher => {
            let (actor, _) = Actor::spawn_linked(None, Dispatcher, ctx.clone(), supervisor).await?;
            let id = actor.get_id();
            write(&ctx.singletons).dispatcher = Some(actor);
            id
        }
        _ => {
            let (actor, _) =
                Actor::spawn_linked(None, AgentSupervisor, ctx.clone(), supervisor).await?;
            let id = actor.get_id();
            write(&ctx.singletons).agents = Some(actor);
            id
        }
    };
    state.kinds.insert(id, kind);
    supervision::report(&ctx.metrics, kind, None, &SupervisionEvent::Started);
    Ok(())
}
