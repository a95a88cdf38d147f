//! `ExecutionActor`: the single writer of one execution. Each message is decoded, decided by the
//! pure state machine, made durable through the store writer, applied to the in-memory state,
//! and only then are replies sent and neighbours told. The mailbox is the lock.

use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tracing::Instrument as _;

use super::machine::{self};
use super::messages::ExecutionMsg;
use super::rejection::Rejection;
use super::state::ExecutionState;
use crate::ids::{ConsumerId, ExecutionId};
use crate::kernel::KernelError;
use crate::kernel::context::{Ctx, write};
use crate::push::Push;

/// How an execution actor comes to life.
pub enum StartMode {
    /// A new execution whose `execution.created` is already durable.
    Created(Box<ExecutionState>),
    /// An existing execution, rebuilt from its events and re-announced to its neighbours
    /// (startup recovery, a restart after a crash).
    Rehydrate,
    /// A passivated execution, rebuilt from its events because something concerns it; its
    /// neighbours already know it.
    Wake,
    /// An execution whose actor kept crashing: rebuilt, then failed with this error.
    GiveUp {
        /// Error recorded in `execution.failed`.
        error: String,
    },
}

/// Arguments of an execution actor.
pub struct ExecutionArgs {
    /// Shared context.
    pub ctx: Arc<Ctx>,
    /// Execution id.
    pub id: ExecutionId,
    /// How it starts.
    pub mode: StartMode,
}

/// State of an execution actor.
pub struct ExecutionActorState {
    pub(super) ctx: Arc<Ctx>,
    pub(super) exec: ExecutionState,
    pub(super) rehydrated: bool,
    /// A commit failed: the store may hold more than memory (a `COMMIT` whose answer was lost),
    /// so the state is reloaded from the store before the next message.
    pub(super) stale: bool,
    /// Status and last sequence known to be stored when a commit failed (memory is ahead).
    pub(super) committed: Option<(crate::status::ExecutionStatus, i64)>,
    /// An assignment whose commit failed, with the push it would have sent: if the reload
    /// finds that the commit landed anyway, nobody else will ever send it (see `reload`).
    pub(super) assignment_in_doubt: Option<(ConsumerId, Push)>,
    /// Deadline, step and stall-check timers (aborted when the actor stops).
    pub(super) timers: super::timers::Timers,
    pub(super) span: tracing::Span,
    /// Trace spans of the active steps (docs/tracing.md).
    pub(super) step_spans: super::spans::StepSpans,
    /// Principal of the message being handled (`None`: the kernel's own work, `system`).
    pub(super) acting_as: Option<Arc<str>>,
    /// Messages handled so far: an idle check or a stop request from an earlier count is stale.
    pub(super) epoch: u64,
    /// Epoch for which an idle check is armed.
    pub(super) idle_armed: Option<u64>,
    /// Reservations of the model calls in flight (LLM gateway).
    pub(super) llm_reserved: crate::guardrails::reservations::Reservations,
}

/// The actor owning one execution.
pub struct ExecutionActor;

impl Actor for ExecutionActor {
    type Msg = ExecutionMsg;
    type State = ExecutionActorState;
    type Arguments = ExecutionArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: ExecutionArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let span = tracing::info_span!(target: crate::trace::LOG_TARGET, "execution", execution.id = %args.id);
        let ctx = args.ctx;
        let give_up = match &args.mode {
            StartMode::GiveUp { error } => Some(error.clone()),
            _ => None,
        };
        let (exec, rehydrated) = match args.mode {
            StartMode::Created(exec) => (*exec, false),
            StartMode::Rehydrate | StartMode::Wake | StartMode::GiveUp { .. } => {
                let events = load_events(&ctx, &args.id).await?;
                let exec = ExecutionState::from_events(&events).ok_or_else(|| {
                    KernelError::Rejected(Rejection::ExecutionNotFound(args.id.to_string()))
                })?;
                (exec, !matches!(args.mode, StartMode::Wake))
            }
        };
        let mut state = ExecutionActorState {
            ctx,
            exec,
            rehydrated,
            stale: false,
            committed: None,
            assignment_in_doubt: None,
            timers: super::timers::Timers::default(),
            span,
            step_spans: super::spans::StepSpans::default(),
            acting_as: None,
            epoch: 0,
            idle_armed: None,
            llm_reserved: Default::default(),
        };
        if let Some(error) = give_up
            && let Some(transition) = machine::fail_by_kernel(&state.exec, &error)
        {
            apply(&mut state, transition).await?;
        }
        Ok(state)
    }

    async fn post_start(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if state.exec.status.is_terminal() {
            // Rebuilt for a message (refused for a terminal execution): it stops after it.
            return Ok(());
        }
        arm_wake(&myself, state);
        if let Some(session) = &state.exec.session {
            write(&state.ctx.sessions).insert(session.id.clone(), state.exec.id.clone());
        }
        if state.rehydrated {
            recover(state);
        }
        passivation::consider(&myself, state);
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let span = state.span.clone();
        let message = match message {
            ExecutionMsg::ActingAs { principal, message } => {
                state.acting_as = Some(principal);
                *message
            }
            other => {
                state.acting_as = None;
                other
            }
        };
        let message = match span.in_scope(|| passivation::intercept(&myself, message, state)) {
            Some(message) => message,
            None => return Ok(()),
        };
        // Instrumented, not entered: the handler awaits, and a guard held across an await
        // would leave its span current for whatever else runs on this thread meanwhile.
        let traced = super::spans::message_span(state, &message);
        handle_traced(&myself, message, state)
            .instrument(traced)
            .instrument(span)
            .await
    }
}

async fn handle_traced(
    myself: &ActorRef<ExecutionMsg>,
    message: ExecutionMsg,
    state: &mut ExecutionActorState,
) -> Result<(), ActorProcessingErr> {
    state.epoch += 1;
    if state.stale
        && let Err(error) = reload(state).await
    {
        refuse(myself, message, error);
        return Ok(());
    }
    super::handling::handle_message(message, state).await?;
    arm_wake(myself, state);
    if state.exec.status.is_terminal() {
        myself.stop(Some("terminal".into()));
    } else {
        passivation::consider(myself, state);
    }
    Ok(())
}

use super::effects::{apply, arm_wake};
use super::passivation;
use super::rebuild::{load_events, recover, refuse, reload};
pub use super::rebuild::{record_creation, record_creation_decided, record_creation_with};
