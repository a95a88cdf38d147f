//! How the execution actor carries out each `ExecutionMsg`: one arm per message, each deciding
//! through the pure state machine and applying the result (see `actor.rs` for the lifecycle
//! around it: reloads, wake timers, stopping and passivation).

use ractor::ActorProcessingErr;

use super::actor::ExecutionActorState;
use super::effects::{
    add, apply, count_step, decide_and_apply, jitter, overdue_step, report_stalls,
};
use super::machine::{self};
use super::messages::ExecutionMsg;
use super::watchdog;

pub(super) async fn handle_message(
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
