//! What the `Kernel` handle forwards to: starting the tree, startup recovery, and one method
//! per kernel operation, each a message to the right actor with a timeout (the agents' and
//! runners' side is in `connections.rs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use ractor::{Actor, ActorRef, RpcReplyPort};
use serde_json::Value;
use tokio::sync::{broadcast, oneshot};

use super::config::KernelConfig;
use super::context::{Ctx, call};
use super::handle::Kernel;
use super::root::{KernelSupervisor, RootArgs};
use super::types::{CommitNotice, KernelError};
use crate::agent_group::{AgentGroupMsg, AgentSupervisorMsg};
use crate::execution::{
    ExecutionMsg, ExecutionSupervisorMsg, Intent, IntentReply, Rejection, StepOutcome,
};
use crate::ids::{AgentId, ExecutionId, SessionId};
use crate::metrics::Metrics;
use crate::runner::ToolDirectory;

use crate::store::{ExecutionRow, Store};

/// The state behind a [`Kernel`] handle.
pub struct KernelInner {
    pub(crate) ctx: Arc<Ctx>,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) commits: broadcast::Sender<CommitNotice>,
    pub(crate) tools: ToolDirectory,
    pub(crate) root: ActorRef<()>,
    pub(super) executions: ActorRef<ExecutionSupervisorMsg>,
    pub(super) connections: AtomicU64,
    stopped: AtomicBool,
    janitor: Option<tokio::task::JoinHandle<()>>,
}

/// Starts the actor tree, recovers every non-terminal execution from the store, and returns
/// the handle.
pub async fn start(config: KernelConfig) -> Result<Kernel, KernelError> {
    let (commits, _) = broadcast::channel(4096);
    let metrics = Arc::new(Metrics::new());
    let store = config.store.clone();
    let ctx = Arc::new(Ctx::new(config, metrics.clone(), commits.clone()));
    let (ready, ready_rx) = oneshot::channel();
    let (root, _) = Actor::spawn(
        None,
        KernelSupervisor,
        RootArgs {
            ctx: ctx.clone(),
            ready,
        },
    )
    .await
    .map_err(|error| KernelError::Unavailable(format!("actor tree did not start: {error}")))?;
    let executions = ready_rx
        .await
        .map_err(|_| KernelError::Unavailable("actor tree did not start".into()))?;
    let janitor = ctx.config.retention_period.map(|period| {
        tokio::spawn(super::retention::retention_loop(
            store.clone(),
            metrics.clone(),
            ctx.clock.clone(),
            period,
            ctx.config.cleanup_interval,
        ))
    });
    let inner = KernelInner {
        janitor,
        ctx,
        store,
        metrics,
        commits,
        tools: ToolDirectory::default(),
        root,
        executions,
        connections: AtomicU64::new(0),
        stopped: AtomicBool::new(false),
    };
    inner.recover().await?;
    Ok(Kernel {
        inner: Arc::new(inner),
    })
}

impl KernelInner {
    pub(super) fn timeout(&self) -> std::time::Duration {
        self.ctx.config.call_timeout
    }

    /// Activates an execution and has it re-announce itself (startup recovery).
    pub(super) async fn activate(
        &self,
        id: &ExecutionId,
    ) -> Result<ActorRef<ExecutionMsg>, KernelError> {
        if let Some(actor) = self.ctx.execution(id) {
            return Ok(actor);
        }
        let message = |reply| ExecutionSupervisorMsg::Activate {
            id: id.clone(),
            announce: true,
            reply,
        };
        call(
            &self.executions,
            message,
            self.timeout(),
            "execution supervisor",
        )
        .await?
    }

    /// Calls an execution actor, rebuilding it from the store if it is passivated.
    pub(super) async fn ask<T: Send + 'static>(
        &self,
        id: &ExecutionId,
        build: impl Fn(RpcReplyPort<Result<T, KernelError>>) -> ExecutionMsg,
    ) -> Result<T, KernelError> {
        self.ctx.ask_execution(id, build).await?
    }

    pub(super) async fn group(
        &self,
        agent_id: &AgentId,
    ) -> Result<ActorRef<AgentGroupMsg>, KernelError> {
        let agents = self
            .ctx
            .agents()
            .ok_or_else(|| KernelError::Unavailable("agent supervisor is not running".into()))?;
        let message = |reply| AgentSupervisorMsg::GetOrSpawn(agent_id.clone(), reply);
        call(&agents, message, self.timeout(), "agent supervisor")
            .await?
            .ok_or_else(|| KernelError::Unavailable("agent group could not start".into()))
    }

    pub(crate) async fn execution(&self, id: &ExecutionId) -> Result<ExecutionRow, KernelError> {
        self.store
            .execution(id)
            .await?
            .ok_or_else(|| Rejection::ExecutionNotFound(id.to_string()).into())
    }

    pub(crate) async fn cancel(&self, id: &ExecutionId) -> Result<ExecutionRow, KernelError> {
        self.ask(id, |reply| ExecutionMsg::Cancel { reply }).await
    }

    pub(crate) async fn signal(
        &self,
        id: &ExecutionId,
        signal_type: String,
        payload: Value,
    ) -> Result<(), KernelError> {
        self.ask(id, |reply| ExecutionMsg::DeliverSignal {
            signal_type: signal_type.clone(),
            payload: payload.clone(),
            reply,
        })
        .await
    }

    /// Maps an unknown execution addressed with a session into the session error of WIRE.md §9.2.
    fn session_error(
        &self,
        error: KernelError,
        execution_id: &ExecutionId,
        session_id: &SessionId,
    ) -> KernelError {
        match error {
            KernelError::Rejected(Rejection::ExecutionNotFound(_)) => {
                match self.ctx.session_owner(session_id) {
                    Some(_) => Rejection::SessionMismatch {
                        session: session_id.to_string(),
                        execution: execution_id.to_string(),
                    }
                    .into(),
                    None => Rejection::SessionNotFound(session_id.to_string()).into(),
                }
            }
            other => other,
        }
    }

    pub(crate) async fn submit_intent(
        &self,
        execution_id: &ExecutionId,
        session_id: &SessionId,
        intent: Intent,
    ) -> Result<IntentReply, KernelError> {
        let owner = self.ctx.session_owner(session_id);
        self.ask(execution_id, |reply| ExecutionMsg::SubmitIntent {
            session_id: session_id.clone(),
            session_owner: owner.clone(),
            intent: intent.clone(),
            reply,
        })
        .await
        .map_err(|error| self.session_error(error, execution_id, session_id))
    }

    pub(crate) async fn agent_step_result(
        &self,
        execution_id: &ExecutionId,
        session_id: &SessionId,
        outcome: StepOutcome,
    ) -> Result<(), KernelError> {
        let owner = self.ctx.session_owner(session_id);
        self.ask(execution_id, |reply| ExecutionMsg::ReportStepResult {
            session_id: session_id.clone(),
            session_owner: owner.clone(),
            outcome: outcome.clone(),
            reply,
        })
        .await
        .map_err(|error| self.session_error(error, execution_id, session_id))
    }

    pub(crate) async fn shutdown(&self) {
        if self.stopped.swap(true, Ordering::SeqCst) {
            return;
        }
        if let Some(janitor) = &self.janitor {
            janitor.abort();
        }
        let started = std::time::Instant::now();
        let timeout = self.ctx.config.shutdown_timeout;
        let _ = self
            .root
            .stop_and_wait(Some("kernel shutdown".into()), Some(timeout))
            .await;
        tracing::info!(
            elapsed_ms = started.elapsed().as_millis() as u64,
            "actor tree stopped"
        );
    }
}
