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
use super::watchdog;
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
    handle_message(message, state).await?;
    arm_wake(myself, state);
    if state.exec.status.is_terminal() {
        myself.stop(Some("terminal".into()));
    } else {
        passivation::consider(myself, state);
    }
    Ok(())
}

async fn handle_message(
    message: ExecutionMsg,
    state: &mut ExecutionActorState,
) -> Result<(), ActorProcessingErr> {
    let settings = state.ctx.config.execution.clone();
    match message {
        ExecutionMsg::SubmitIntent {
            session_id,
            session_owner,
            intent,
            capabilities,
            reply,
        } => {
            let result = super::submit::submit_intent(
                state,
                &session_id,
                session_owner.as_ref(),
                intent,
                capabilities,
            )
            .await;
            let _ = reply.send(result);
        }
        ExecutionMsg::ReportStepResult {
            session_id,
            session_owner,
            mut outcome,
            capabilities,
            reply,
        } => {
            let result =
                match machine::check_session(&state.exec, &session_id, session_owner.as_ref()) {
                    Ok(()) => {
                        match super::hooks::post_tool(state, &mut outcome, Some(capabilities)).await
                        {
                            Ok(post_tool) => decide_and_apply(state, |exec| {
                                machine::agent_step_result(exec, &outcome).map(|transition| {
                                    super::submit::with_first(transition, post_tool.events)
                                })
                            })
                            .await
                            .map(|()| post_tool.reply),
                            Err(error) => Err(error),
                        }
                    }
                    Err(rejection) => Err(rejection.into()),
                };
            count_step(state, &outcome, &result);
            let _ = reply.send(result);
        }
        ExecutionMsg::ReportRunnerResult { mut outcome, reply } => {
            let result = match super::hooks::post_tool(state, &mut outcome, None).await {
                Ok(post_tool) => {
                    let (now, jitter) = (state.ctx.now(), jitter(&settings));
                    decide_and_apply(state, |exec| {
                        machine::runner_result(exec, &outcome, now, &settings, jitter).map(
                            |transition| super::submit::with_first(transition, post_tool.events),
                        )
                    })
                    .await
                }
                Err(error) => Err(error),
            };
            count_step(state, &outcome, &result);
            let _ = reply.send(result);
        }
        ExecutionMsg::MarkStepStarted {
            step_id,
            runner_id,
            reply,
        } => {
            let result = decide_and_apply(state, |exec| {
                machine::step_started(exec, &step_id, &runner_id)
            })
            .await;
            let _ = reply.send(result);
        }
        ExecutionMsg::RecordStepProgress {
            step_id,
            runner_id,
            report,
            reply,
        } => {
            let result = decide_and_apply(state, |exec| {
                machine::step_progress(exec, &step_id, &runner_id, report)
            })
            .await;
            let _ = reply.send(result);
        }
        ExecutionMsg::DeliverSignal {
            signal_type,
            payload,
            sent_by,
            reply,
        } => {
            let now = state.ctx.now();
            let result = {
                let holder_lost = state.exec.session.as_ref().is_some_and(|session| {
                    state
                        .ctx
                        .consumer_lost(&state.exec.agent_id, &session.consumer_id)
                });
                decide_and_apply(state, |exec| {
                    let mut transition =
                        machine::signal(exec, &signal_type, &payload, now, &settings, holder_lost)?;
                    // Who sent it, on the `signal.received` the machine wrote.
                    for event in &mut transition.events {
                        if let crate::events::EventBody::SignalReceived { sent_by: by, .. } =
                            &mut event.body
                        {
                            by.clone_from(&sent_by);
                        }
                    }
                    Ok(transition)
                })
                .await
            };
            let _ = reply.send(result);
        }
        ExecutionMsg::ReconcileStep {
            step_id,
            answer,
            by,
            reply,
        } => {
            let now = state.ctx.now();
            let result = decide_and_apply(state, |exec| {
                machine::reconcile(exec, &step_id, &answer, by.clone(), now, &settings)
            })
            .await;
            let _ = reply.send(result);
        }
        ExecutionMsg::Cancel { reply } => {
            let result = decide_and_apply(state, machine::cancel)
                .await
                .map(|()| state.exec.row());
            if result.is_ok() {
                state.ctx.metrics.execution_outcome("cancelled");
            }
            let _ = reply.send(result);
        }
        ExecutionMsg::OfferToConsumer { consumer_id, reply } => {
            let result = match machine::assign(&state.exec, &consumer_id) {
                Ok((transition, mut push)) => match apply(state, transition).await {
                    Ok(()) => {
                        let _span = super::spans::push(state, &mut push, &consumer_id);
                        Ok(push)
                    }
                    Err(error) => {
                        super::spans::stamp(state, &mut push);
                        state.assignment_in_doubt = Some((consumer_id, push));
                        Err(error)
                    }
                },
                Err(rejection) => Err(rejection.into()),
            };
            if result.is_ok() {
                state.rehydrated = false;
            }
            let _ = reply.send(result);
        }
        ExecutionMsg::ClaimJob {
            job,
            runner_id,
            reply,
        } => {
            let claimed =
                match machine::claim_job(&state.exec, &job, &runner_id, state.ctx.now(), &settings)
                {
                    Some((transition, mut delivered)) => {
                        let applied = apply(state, transition).await.ok();
                        delivered.traceparent =
                            super::spans::job_traceparent(state, &delivered.step_id);
                        applied.map(|()| delivered)
                    }
                    None => None,
                };
            let _ = reply.send(claimed);
        }
        ExecutionMsg::ConsumerLost {
            consumer_id,
            reason,
            ack,
        } => {
            if let Some(transition) = machine::consumer_lost(&state.exec, &consumer_id, &reason) {
                apply(state, transition).await?;
            }
            if let Some(ack) = ack {
                let _ = ack.send(());
            }
        }
        ExecutionMsg::RunnerLost { step_id, job_id } => {
            let (now, jitter) = (state.ctx.now(), jitter(&settings));
            if let Some(transition) =
                machine::runner_lost(&state.exec, &step_id, &job_id, now, &settings, jitter)
            {
                apply(state, transition).await?;
            }
        }
        ExecutionMsg::Wake => {
            let now = state.ctx.now();
            state.timers.woke(now);
            let deadline = add(state.exec.created_at, settings.execution_timeout);
            if let Some(transition) = machine::execution_deadline(&state.exec, deadline, now) {
                apply(state, transition).await?;
            }
            if let Some(transition) = machine::approval_expired(&state.exec, now, &settings) {
                apply(state, transition).await?;
            }
            if let Some(step_id) = overdue_step(&state.exec, now)
                && let Some(transition) = machine::step_deadline(&state.exec, &step_id, now)
            {
                apply(state, transition).await?;
            }
            if let Some(transition) = watchdog::check(&state.exec, now, &settings) {
                let stalls = transition.events.clone();
                apply(state, transition).await?;
                report_stalls(state, &stalls);
            }
        }
        ExecutionMsg::GetExecution { reply } => {
            let _ = reply.send(state.exec.row());
        }
        ExecutionMsg::GetApproval { step_id, reply } => {
            let _ = reply.send(Ok(super::messages::ApprovalFacts {
                created_by: state.exec.created_by.clone(),
                request: state.exec.approval_requests.get(&step_id).cloned(),
            }));
        }
        ExecutionMsg::AdmitLlmCall {
            model_id,
            ask_approval,
            estimate,
            reply,
        } => {
            let admission =
                super::llm_admission::admit(state, &model_id, ask_approval, estimate).await;
            let _ = reply.send(admission);
        }
        ExecutionMsg::EndBudgetWait { reply } => {
            let result = decide_and_apply(state, machine::budget_wait_timed_out).await;
            let _ = reply.send(result);
        }
        ExecutionMsg::RecordLlmCall {
            call,
            reservation,
            reply,
        } => {
            if let Some(reservation) = reservation {
                state.llm_reserved.settle(reservation);
            }
            let result = match call {
                Some(call) => {
                    decide_and_apply(state, |exec| machine::llm_called(exec, call.clone())).await
                }
                None => Ok(()),
            };
            let _ = reply.send(result);
        }
        // Handled by `passivation::intercept` before anything else.
        ExecutionMsg::IdleCheck { .. } | ExecutionMsg::Passivate { .. } => {}
        #[cfg(any(test, feature = "testing"))]
        ExecutionMsg::Crash => return Err("crash requested".into()),
        // Unwrapped by `handle` before anything else.
        ExecutionMsg::ActingAs { message, .. } => {
            return Box::pin(handle_message(*message, state)).await;
        }
    }
    Ok(())
}

use super::effects::{
    add, apply, arm_wake, count_step, decide_and_apply, jitter, overdue_step, report_stalls,
};
use super::passivation;
use super::rebuild::{load_events, recover, refuse, reload};
pub use super::rebuild::{record_creation, record_creation_decided, record_creation_with};
