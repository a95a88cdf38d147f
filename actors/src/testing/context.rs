//! A bare context for one actor under test: the real store writer and policy actor on a
//! memory store, and probes in place of the dispatcher and of one agent group.

use std::sync::Arc;

use super::leak::LeakCheck;
use super::memory_store::MemoryStore;
use super::probe::ProbeHandle;
use crate::kernel::KernelConfig;
use crate::policy::PolicyEngine;

/// A bare context for one actor under test: a real store writer and policy actor on a memory
/// store, and probes in place of the dispatcher and of the agent group of `agent_id`.
pub struct ProbeContext {
    /// The context to give the actor under test.
    pub ctx: Arc<crate::kernel::context::Ctx>,
    /// Stands in for the agent group of the agent.
    pub agents: ProbeHandle<crate::agent_group::AgentGroupMsg>,
    /// Stands in for the dispatcher.
    pub dispatcher: ProbeHandle<crate::runner::DispatcherMsg>,
    /// The store.
    pub store: Arc<MemoryStore>,
    /// The store writer, the policy actor and whatever the test adds: checked by
    /// [`finish`](Self::finish).
    pub actors: LeakCheck,
}

impl ProbeContext {
    /// Builds the context with `policy` and probes for `agent_id`'s group and the dispatcher.
    pub async fn start(agent_id: &str, policy: Arc<dyn PolicyEngine>) -> Self {
        Self::start_with(agent_id, policy, |_| {}).await
    }

    /// Builds the context as [`start`](Self::start) does, letting `adjust` change the
    /// configuration (its clock is [`Clock::tokio`](crate::time::Clock::tokio) unless `adjust`
    /// sets another).
    pub async fn start_with(
        agent_id: &str,
        policy: Arc<dyn PolicyEngine>,
        adjust: impl FnOnce(&mut KernelConfig),
    ) -> Self {
        use crate::kernel::context::{Ctx, write};
        let store = Arc::new(MemoryStore::default());
        let mut config = KernelConfig::new(store.clone(), policy.clone());
        config.clock = crate::time::Clock::tokio();
        adjust(&mut config);
        let (commits, _) = tokio::sync::broadcast::channel(64);
        let metrics = Arc::new(crate::metrics::Metrics::new());
        let ctx = Arc::new(Ctx::new(config, metrics.clone(), commits.clone()));
        let writer_args = crate::store_writer::StoreWriterArgs {
            store: store.clone(),
            metrics: metrics.clone(),
            commits,
            max_batch: 64,
            traced: false,
        };
        let policy_args = crate::policy::PolicyArgs {
            engine: policy,
            hooks: Vec::new().into(),
            metrics,
            store: store.clone(),
            clock: ctx.clock.clone(),
        };
        // Probes first: they are stopped when the context is dropped, after the check, so
        // they belong to its baseline.
        let agents = ProbeHandle::start().await;
        let dispatcher = ProbeHandle::start().await;
        let mut actors = LeakCheck::new();
        let writer = actors
            .spawn(
                "store writer",
                crate::store_writer::StoreWriter,
                writer_args,
            )
            .await;
        let policy = actors
            .spawn("policy actor", crate::policy::PolicyActor, policy_args)
            .await;
        {
            let mut singletons = write(&ctx.singletons);
            singletons.writer = Some(writer);
            singletons.policy = Some(policy);
            singletons.dispatcher = Some(dispatcher.actor.clone());
        }
        ctx.agent_groups
            .insert(crate::ids::AgentId::new(agent_id), agents.actor.clone());
        Self {
            ctx,
            agents,
            dispatcher,
            store,
            actors,
        }
    }

    /// Makes `actor` the execution actor of `id` (a probe, usually) for the actors under test.
    pub fn register_execution(
        &self,
        id: &crate::ids::ExecutionId,
        actor: ractor::ActorRef<crate::execution::ExecutionMsg>,
    ) {
        self.ctx.executions.insert(id.clone(), actor);
    }

    /// Makes `actor` the dispatcher in place of the probe (to test the real one).
    pub fn register_dispatcher(&self, actor: ractor::ActorRef<crate::runner::DispatcherMsg>) {
        crate::kernel::context::write(&self.ctx.singletons).dispatcher = Some(actor);
    }

    /// Spawns the actor under test and tracks it for the leak check.
    pub async fn spawn<A: ractor::Actor>(
        &mut self,
        name: &str,
        actor: A,
        args: A::Arguments,
    ) -> ractor::ActorRef<A::Msg> {
        self.actors.spawn(name, actor, args).await
    }

    /// Stops the actor under test, then the store writer and the policy actor, and checks that
    /// none of them (nor anything they started) still runs.
    pub async fn finish(self) {
        self.actors.finish().await;
    }
}
