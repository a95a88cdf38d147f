//! Shared context of the actor tree, and the whole state of the [`Kernel`](super::Kernel)
//! handle: the directory of live actors (owned and updated by the supervisors, read by
//! everyone), the session index, the tool directory, the settings, and what the handle needs to
//! stop the tree (the root, the retention janitor). Locks here are never held across an
//! `.await`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use ractor::{ActorRef, MessagingErr, RpcReplyPort, rpc::CallResult};
use tokio::sync::broadcast;

use super::config::KernelConfig;
use super::types::{CommitNotice, KernelError};
use crate::agent_group::{AgentGroupMsg, AgentSupervisorMsg};
use crate::error::StoreError;
use crate::execution::{ExecutionMsg, ExecutionSupervisorMsg};
use crate::ids::{AgentId, ConsumerId, ExecutionId, SessionId};
use crate::metrics::Metrics;
use crate::policy::PolicyMsg;
use crate::runner::{DispatcherMsg, ToolDirectory};
use crate::store::{Commit, Store};
use crate::store_writer::StoreWriterMsg;
use crate::supervision::Directory;
use crate::time::{Clock, Timestamp};

/// References to the singleton actors; replaced when one is restarted.
#[derive(Default)]
pub struct Singletons {
    /// Store writer.
    pub writer: Option<ActorRef<StoreWriterMsg>>,
    /// Policy actor.
    pub policy: Option<ActorRef<PolicyMsg>>,
    /// Dispatcher.
    pub dispatcher: Option<ActorRef<DispatcherMsg>>,
    /// Agent supervisor.
    pub agents: Option<ActorRef<AgentSupervisorMsg>>,
    /// Execution supervisor (never restarted: its failure stops the root).
    pub executions: Option<ActorRef<ExecutionSupervisorMsg>>,
}

/// Everything actors share, and the state of the [`Kernel`](super::Kernel) handle.
pub struct Ctx {
    /// Settings.
    pub config: KernelConfig,
    /// Where "now" comes from (copied from the configuration).
    pub clock: Clock,
    /// Storage (reads; writes go through the store writer).
    pub store: Arc<dyn Store>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Commit notices for live streams.
    pub commits: broadcast::Sender<CommitNotice>,
    /// Singleton actors.
    pub singletons: RwLock<Singletons>,
    /// Live execution actors (published by the execution supervisor).
    pub executions: Directory<ExecutionId, ExecutionMsg>,
    /// Live agent groups (published by the agent supervisor).
    pub agent_groups: Directory<AgentId, AgentGroupMsg>,
    /// Session id → execution holding it.
    pub sessions: RwLock<HashMap<SessionId, ExecutionId>>,
    /// `(agent_id, consumer_id)` of consumers whose disconnect grace ran out and that have not
    /// come back (maintained by the agent groups, read by executions).
    pub lost_consumers: RwLock<std::collections::HashSet<(AgentId, ConsumerId)>>,
    /// Policy in force: engine and hooks (the policy actor is restarted with it; creations
    /// read their `pre_create` hooks here).
    pub policy_in_force: RwLock<crate::policy::InForce>,
    /// Tool schemas published by runners (WIRE.md §13.7).
    pub tools: ToolDirectory,
    /// Numbers agent and runner connections, so a disconnect names the stream that ended.
    pub(crate) connections: AtomicU64,
    /// The root supervisor, set once by [`start`](super::start).
    pub(crate) root: OnceLock<ActorRef<()>>,
    /// The retention clean-up task, when a retention period is set; aborted on shutdown.
    pub(crate) janitor: OnceLock<tokio::task::JoinHandle<()>>,
    /// Set by the first shutdown; later ones return at once.
    pub(crate) stopped: AtomicBool,
}

/// Reads a lock, recovering from poisoning (a panicking actor must not wedge the kernel).
pub fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Writes a lock, recovering from poisoning.
pub fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Ctx {
    /// Returns a context with no actors registered yet.
    pub fn new(
        config: KernelConfig,
        metrics: Arc<Metrics>,
        commits: broadcast::Sender<CommitNotice>,
    ) -> Self {
        // A store that folds commits itself is the only one that knows its transactions.
        config.store.observe_transactions(metrics.clone());
        Self {
            policy_in_force: RwLock::new(crate::policy::InForce {
                engine: config.policy.clone(),
                hooks: config.hooks.clone().into(),
            }),
            clock: config.clock.clone(),
            store: config.store.clone(),
            config,
            metrics,
            commits,
            singletons: RwLock::new(Singletons::default()),
            executions: Directory::default(),
            agent_groups: Directory::default(),
            sessions: RwLock::new(HashMap::new()),
            lost_consumers: RwLock::new(std::collections::HashSet::new()),
            tools: ToolDirectory::default(),
            connections: AtomicU64::new(0),
            root: OnceLock::new(),
            janitor: OnceLock::new(),
            stopped: AtomicBool::new(false),
        }
    }

    /// Returns the current time of the kernel's clock.
    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// Returns the store writer.
    pub fn writer(&self) -> Option<ActorRef<StoreWriterMsg>> {
        read(&self.singletons).writer.clone()
    }

    /// Returns the policy actor.
    pub fn policy(&self) -> Option<ActorRef<PolicyMsg>> {
        read(&self.singletons).policy.clone()
    }

    /// Returns the dispatcher.
    pub fn dispatcher(&self) -> Option<ActorRef<DispatcherMsg>> {
        read(&self.singletons).dispatcher.clone()
    }

    /// Returns the agent supervisor.
    pub fn agents(&self) -> Option<ActorRef<AgentSupervisorMsg>> {
        read(&self.singletons).agents.clone()
    }

    /// Returns the execution supervisor.
    pub fn execution_supervisor(&self) -> Option<ActorRef<ExecutionSupervisorMsg>> {
        read(&self.singletons).executions.clone()
    }

    /// Returns the execution supervisor, or `Unavailable` when the tree is not running.
    pub(crate) fn running_execution_supervisor(
        &self,
    ) -> Result<ActorRef<ExecutionSupervisorMsg>, KernelError> {
        self.execution_supervisor()
            .ok_or_else(|| KernelError::Unavailable("execution supervisor is not running".into()))
    }

    /// Returns the live actor of an execution.
    pub fn execution(&self, id: &ExecutionId) -> Option<ActorRef<ExecutionMsg>> {
        self.executions.get(id)
    }

    /// Returns the live actor of an execution, rebuilding a passivated one from the store.
    pub async fn activate(&self, id: &ExecutionId) -> Result<ActorRef<ExecutionMsg>, KernelError> {
        self.activate_with(id, false).await
    }

    /// [`Ctx::activate`]; with `announce`, a rebuilt execution offers itself to its agent
    /// again (startup recovery).
    pub(crate) async fn activate_with(
        &self,
        id: &ExecutionId,
        announce: bool,
    ) -> Result<ActorRef<ExecutionMsg>, KernelError> {
        if let Some(actor) = self.execution(id) {
            return Ok(actor);
        }
        self.ask_execution_supervisor(|reply| ExecutionSupervisorMsg::Activate {
            id: id.clone(),
            announce,
            reply,
        })
        .await?
    }

    /// Calls the execution supervisor with the call timeout.
    pub(crate) async fn ask_execution_supervisor<R: Send + 'static>(
        &self,
        build: impl FnOnce(RpcReplyPort<R>) -> ExecutionSupervisorMsg,
    ) -> Result<R, KernelError> {
        call(
            &self.running_execution_supervisor()?,
            build,
            self.config.call_timeout,
            "execution supervisor",
        )
        .await
    }

    /// Calls an execution actor, activating it first; an actor that stopped in between
    /// (passivated after the look-up) is activated once more.
    pub async fn ask_execution<T: Send + 'static>(
        &self,
        id: &ExecutionId,
        build: impl Fn(RpcReplyPort<T>) -> ExecutionMsg,
    ) -> Result<T, KernelError> {
        let mut last = KernelError::Unavailable("execution actor unavailable".into());
        // A call made on behalf of a request carries its principal to the events it causes.
        let principal = crate::principal::current();
        let build = |reply| {
            let message = build(reply);
            match &principal {
                Some(principal) => ExecutionMsg::ActingAs {
                    principal: principal.clone(),
                    message: Box::new(message),
                },
                None => message,
            }
        };
        for _ in 0..3 {
            let actor = self.activate(id).await?;
            match call(&actor, &build, self.config.call_timeout, "execution actor").await {
                Ok(answer) => return Ok(answer),
                Err(KernelError::Unavailable(reason)) => last = KernelError::Unavailable(reason),
                Err(error) => return Err(error),
            }
        }
        Err(last)
    }

    /// Returns whether the consumer holding an execution's session is gone for good.
    pub fn consumer_lost(&self, agent_id: &AgentId, consumer_id: &ConsumerId) -> bool {
        read(&self.lost_consumers).contains(&(agent_id.clone(), consumer_id.clone()))
    }

    /// Returns the execution holding a session.
    pub fn session_owner(&self, session_id: &SessionId) -> Option<ExecutionId> {
        read(&self.sessions).get(session_id).cloned()
    }

    /// Sends a message to an agent group, spawning the group if needed.
    pub fn tell_agent_group(&self, agent_id: &AgentId, message: AgentGroupMsg) {
        let group = self.agent_groups.get(agent_id);
        let undelivered = match group {
            Some(group) => match group.send_message(message) {
                Ok(()) => None,
                Err(MessagingErr::SendErr(message)) => Some(message),
                Err(_) => None,
            },
            None => Some(message),
        };
        if let Some(message) = undelivered
            && let Some(agents) = self.agents()
        {
            let _ = agents.send_message(AgentSupervisorMsg::Forward(agent_id.clone(), message));
        }
    }

    /// Sends a message to the dispatcher; dropped (and logged) if it is gone.
    pub fn tell_dispatcher(&self, message: DispatcherMsg) {
        match self.dispatcher() {
            Some(dispatcher) => {
                if dispatcher.send_message(message).is_err() {
                    tracing::warn!("dispatcher unreachable, message dropped");
                }
            }
            None => tracing::warn!("no dispatcher, message dropped"),
        }
    }

    /// Commits through the store writer and waits for durability. A store that folds
    /// concurrent groups itself ([`Store::folds_groups`]) gets the commit directly. With traces
    /// on, the wait is a `commit` span (a child of the current span) naming its event count.
    pub async fn commit(&self, commit: Commit) -> Result<(), KernelError> {
        if self.config.traces.is_none() {
            return self.commit_untraced(commit).await;
        }
        let span = tracing::info_span!(
            target: crate::trace::TARGET,
            "commit",
            execution.id = %commit.execution.id,
            commit.events = commit.events.len(),
        );
        tracing::Instrument::instrument(self.commit_untraced(commit), span).await
    }

    async fn commit_untraced(&self, commit: Commit) -> Result<(), KernelError> {
        if self.store.folds_groups() {
            return self.commit_direct(commit).await;
        }
        let writer = self
            .writer()
            .ok_or_else(|| KernelError::Unavailable("store writer is not running".into()))?;
        let timeout = self.config.call_timeout;
        let result = writer
            .call(
                |reply| StoreWriterMsg::Append(Box::new(commit), reply),
                Some(timeout),
            )
            .await;
        match result {
            Ok(CallResult::Success(Ok(()))) => Ok(()),
            Ok(CallResult::Success(Err(error))) => Err(KernelError::Store(error)),
            Ok(CallResult::Timeout) => Err(KernelError::Store(StoreError::Unavailable(
                "commit timed out".into(),
            ))),
            Ok(CallResult::SenderError) | Err(_) => Err(KernelError::Unavailable(
                "store writer is not running".into(),
            )),
        }
    }
}

impl Ctx {
    /// Hands one commit to a store that batches by itself, as the `StoreWriter` would: bounded
    /// by the call timeout, counted in the commit metrics, and announced to live streams once
    /// durable.
    async fn commit_direct(&self, commit: Commit) -> Result<(), KernelError> {
        let notice = CommitNotice {
            execution_id: commit.execution.id.clone(),
            last_sequence: commit.execution.last_sequence,
        };
        let started = std::time::Instant::now();
        let committed = tokio::time::timeout(
            self.config.call_timeout,
            self.store.commit_group(vec![commit]),
        )
        .await;
        let result = match committed {
            Ok(results) => results.into_iter().next().unwrap_or_else(|| {
                Err(StoreError::Internal(
                    "the store returned no result for this commit".into(),
                ))
            }),
            Err(_) => Err(StoreError::Unavailable("commit timed out".into())),
        };
        // The store counts its transactions' sizes itself (`Store::observe_transactions`).
        self.metrics.commit_wait(started.elapsed());
        if result.is_ok() {
            // No receiver is fine: nobody is streaming right now.
            let _ = self.commits.send(notice);
        }
        result.map_err(KernelError::Store)
    }
}

/// Calls an actor with a timeout and maps transport failures into [`KernelError`].
pub async fn call<M, R>(
    actor: &ActorRef<M>,
    build: impl FnOnce(RpcReplyPort<R>) -> M,
    timeout: Duration,
    what: &str,
) -> Result<R, KernelError>
where
    M: ractor::Message,
    R: Send + 'static,
{
    match actor.call(build, Some(timeout)).await {
        Ok(CallResult::Success(reply)) => Ok(reply),
        Ok(CallResult::Timeout) => Err(KernelError::Timeout(format!(
            "{what} did not answer in time"
        ))),
        Ok(CallResult::SenderError) | Err(_) => {
            Err(KernelError::Unavailable(format!("{what} is not running")))
        }
    }
}
