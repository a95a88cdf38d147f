//! What an execution actor does around the pure state machine: commit a transition and apply
//! it, run its effects, count it, and keep its timers armed.

use super::actor::ExecutionActorState;
use super::commands::{Effect, StepOutcome};
use super::machine::Transition;
use super::messages::ExecutionMsg;
use super::rejection::Rejection;
use super::state::ExecutionState;
use super::watchdog;
use crate::agent_group::AgentGroupMsg;
use crate::events::seal;
use crate::guardrails::concurrency::LabelSet;
use crate::ids::{ConsumerId, RunnerId, SessionId, StepId};
use crate::kernel::KernelError;
use crate::kernel::context::{read, write};
use crate::runner::DispatcherMsg;
use crate::status::StepStatus;
use crate::store::Commit;
use crate::time::{self, Timestamp};
use ractor::ActorRef;

pub(super) fn count_step(
    state: &ExecutionActorState,
    outcome: &StepOutcome,
    result: &Result<impl Sized, KernelError>,
) {
    if result.is_ok()
        && let Some(step) = state.exec.step(&outcome.step_id)
        && step.status.is_terminal()
    {
        state.ctx.metrics.step_ended(step.status.as_str());
        let took = (step.updated_at - step.created_at)
            .to_std()
            .map_or(0.0, |took| took.as_secs_f64());
        state
            .ctx
            .metrics
            .operator
            .step_finished(&step.tool_id, step.status.as_str(), took);
    }
}

pub(super) async fn decide_and_apply(
    state: &mut ExecutionActorState,
    decide: impl FnOnce(&ExecutionState) -> Result<Transition, Rejection>,
) -> Result<(), KernelError> {
    let transition = decide(&state.exec)?;
    apply(state, transition).await
}

/// Makes a transition durable, applies it, then runs its effects. On a store failure nothing
/// changes in memory and the error is returned.
pub(super) async fn apply(
    state: &mut ExecutionActorState,
    transition: Transition,
) -> Result<(), KernelError> {
    let consumer = state
        .exec
        .session
        .as_ref()
        .map(|session| session.consumer_id.clone());
    let session_before = indexed_session(&state.exec);
    let mut results = Vec::new();
    if !transition.events.is_empty() {
        let mut events = seal(
            &state.exec.id,
            state.exec.last_sequence,
            state.ctx.now(),
            None,
            transition.events,
        );
        // Shared by the events (a reference count each, not a copy of the name).
        let principal = state
            .acting_as
            .clone()
            .unwrap_or_else(crate::principal::system);
        for event in &mut events {
            event.principal = Some(principal.clone());
        }
        // Applied in place: a failed commit marks the state stale, and it is reloaded from the
        // store before the next message (the store may hold the commit even then).
        let (before, before_sequence) = (state.exec.status, state.exec.last_sequence);
        results = {
            let in_force = read(&state.ctx.policy_in_force);
            super::breakers::tool_results(&state.exec, &events, in_force.engine.breakers())
        };
        let mut touched: Vec<StepId> = Vec::new();
        for event in &events {
            state.exec.apply(event);
            if let Some(step_id) = &event.step_id
                && !touched.contains(step_id)
            {
                touched.push(step_id.clone());
            }
        }
        let marks = super::spans::step_marks(state, &events);
        let exec = &state.exec;
        let steps = touched
            .iter()
            .filter_map(|id| exec.step(id))
            .map(|step| exec.step_row(step))
            .collect();
        let commit = Commit {
            execution: exec.row(),
            events,
            steps,
            previous_status: Some(before),
        };
        if let Err(error) = state.ctx.commit(commit).await {
            state.stale = true;
            state.committed.get_or_insert((before, before_sequence));
            return Err(error);
        }
        super::spans::observe_steps(state, marks);
        state
            .ctx
            .metrics
            .execution_moved(&state.exec.id, Some(before), state.exec.status);
    }
    let session_after = indexed_session(&state.exec);
    if session_before != session_after {
        let mut sessions = write(&state.ctx.sessions);
        if let Some(old) = &session_before {
            sessions.remove(old);
            crate::shrink::relax(&mut sessions);
        }
        if let Some(new) = &session_after {
            sessions.insert(new.clone(), state.exec.id.clone());
        }
    }
    run_effects(state, consumer, transition.effects);
    if !results.is_empty()
        && let Some(transition) = super::breakers::report(state, results).await
    {
        // Circuit events carry no step result: this does not come back here.
        Box::pin(apply(state, transition)).await?;
    }
    Ok(())
}

/// The session `ctx.sessions` maps to this execution: its session while it is not terminal.
/// A terminal execution keeps its session in its state (and projection) but leaves the map,
/// as recovery never puts it there; otherwise every completed execution would keep an entry
/// for the life of the process.
fn indexed_session(exec: &ExecutionState) -> Option<SessionId> {
    match &exec.session {
        Some(session) if !exec.status.is_terminal() => Some(session.id.clone()),
        _ => None,
    }
}

pub(super) fn run_effects(
    state: &ExecutionActorState,
    consumer: Option<ConsumerId>,
    effects: Vec<Effect>,
) {
    let exec = &state.exec;
    for effect in effects {
        match effect {
            Effect::PushToAgent(mut push) => {
                if let Some(consumer_id) = &consumer {
                    let span = super::spans::push(state, &mut push, consumer_id);
                    let _pushing = span.enter();
                    let message = AgentGroupMsg::Push {
                        consumer_id: consumer_id.clone(),
                        push,
                    };
                    state.ctx.tell_agent_group(&exec.agent_id, message);
                }
            }
            Effect::EnqueueJob(job) => state.ctx.tell_dispatcher(DispatcherMsg::Enqueue(job)),
            Effect::StepEnded {
                step_id,
                cancel_reason,
            } => {
                state.ctx.tell_dispatcher(DispatcherMsg::StepEnded {
                    step_id,
                    cancel_reason,
                });
            }
            Effect::BecamePending => {
                let message = AgentGroupMsg::ExecutionPending {
                    execution_id: exec.id.clone(),
                    priority: exec.priority,
                    labels: exec.labels.as_deref().map(LabelSet::new),
                    reply: None,
                };
                state.ctx.tell_agent_group(&exec.agent_id, message);
            }
            Effect::SessionEnded { consumer_id } => {
                let message = AgentGroupMsg::SessionEnded {
                    consumer_id,
                    execution_id: exec.id.clone(),
                };
                state.ctx.tell_agent_group(&exec.agent_id, message);
            }
        }
    }
}

/// The step deadlines enforced now: those of the active steps, except a remote step waiting
/// out a retry delay. None while a signal wait or an approval blocks the execution (the next
/// message after the resume re-arms the check) or once it has ended.
fn enforced_step_deadlines(exec: &ExecutionState) -> impl Iterator<Item = (&StepId, Timestamp)> {
    let enforced = !exec.hard_blocked() && !exec.status.is_terminal();
    exec.active_steps()
        .filter(move |_| enforced)
        .filter(|step| {
            step.status != StepStatus::Pending || !step.remote || step.not_before.is_none()
        })
        .filter_map(|step| step.deadline.map(|deadline| (&step.id, deadline)))
}

/// The step whose enforced deadline passed by `now` first (the earliest created among equal
/// deadlines), for the wake-up to time out.
pub(super) fn overdue_step(exec: &ExecutionState, now: Timestamp) -> Option<StepId> {
    enforced_step_deadlines(exec)
        .filter(|(_, deadline)| *deadline <= now)
        .reduce(|first, next| if next.1 < first.1 { next } else { first })
        .map(|(step_id, _)| step_id.clone())
}

/// Keeps the wake-up due by the earliest of what the execution has to do at a time of its own:
/// its deadline, the enforced step deadlines and the stalls not recorded yet (none once it has
/// ended: the armed wake-up goes with the actor, which stops).
pub(super) fn arm_wake(myself: &ActorRef<ExecutionMsg>, state: &mut ExecutionActorState) {
    let exec = &state.exec;
    let settings = &state.ctx.config.execution;
    let deadline =
        (!exec.status.is_terminal()).then(|| add(exec.created_at, settings.execution_timeout));
    let steps = enforced_step_deadlines(exec).map(|(_, deadline)| deadline);
    let stalls = watchdog::due_times(exec, settings);
    let earliest = deadline
        .into_iter()
        .chain(exec.approval_expiry())
        .chain(steps)
        .chain(stalls)
        .min();
    let now = state.ctx.now();
    state.timers.sync_wake(myself, now, earliest);
}

/// Logs and counts the stalls just recorded.
pub(super) fn report_stalls(state: &ExecutionActorState, stalls: &[crate::events::NewEvent]) {
    for stall in stalls {
        if let crate::events::EventBody::ExecutionStalled {
            reason,
            step_id,
            runner_id,
            since,
        } = &stall.body
        {
            tracing::warn!(
                execution.id = %state.exec.id,
                agent.id = %state.exec.agent_id,
                reason = %reason,
                step.id = step_id.as_ref().map_or("", StepId::as_str),
                runner.id = runner_id.as_ref().map_or("", RunnerId::as_str),
                since = %time::format(since),
                "execution stalled"
            );
            state.ctx.metrics.stall(reason);
        }
    }
}

/// Draws where a retry delay falls within its jitter range (1.0, the full backoff, when
/// jitter is off).
pub(super) fn jitter(settings: &super::commands::ExecutionSettings) -> f64 {
    if settings.retry_jitter {
        rand::random::<f64>()
    } else {
        1.0
    }
}

pub(super) use crate::time::add;
