//! Kernel-side endings and resets: cancel, supervision failure, step and execution deadlines,
//! lost consumers.

use super::super::commands::Effect;
use super::super::rejection::Rejection;
use super::super::state::ExecutionState;
use super::*;
use crate::events::{EventBody, NewEvent};
use crate::ids::{ConsumerId, StepId};
use crate::push::Push;
use crate::time::Timestamp;

/// Ends the execution from the kernel side (cancel, timeouts, supervision): cancels steps,
/// records the terminal event and tells the agent.
fn terminate(
    state: &ExecutionState,
    step_reason: &str,
    terminal: EventBody,
    transition: &mut Transition,
) {
    cancel_steps(state, step_reason, None, transition);
    transition.event(NewEvent::execution(terminal));
    if state.session.is_some() {
        transition.effect(Effect::PushToAgent(Push::execution_cancelled(&state.id)));
    }
    end_session(state, transition);
}

/// Cancels the execution on request.
pub fn cancel(state: &ExecutionState) -> Result<Transition, Rejection> {
    if state.status.is_terminal() {
        return Err(Rejection::Terminal {
            execution: state.id.to_string(),
            status: state.status,
        });
    }
    let mut transition = Transition::default();
    let terminal = EventBody::ExecutionCancelled {
        reason: "cancelled by request".to_owned(),
    };
    terminate(state, "execution cancelled", terminal, &mut transition);
    Ok(transition)
}

/// Fails the execution because the kernel gave up on it (crash loop, supervision).
pub fn fail_by_kernel(state: &ExecutionState, error: &str) -> Option<Transition> {
    if state.status.is_terminal() {
        return None;
    }
    let mut transition = Transition::default();
    terminate(
        state,
        "execution failed",
        EventBody::ExecutionFailed {
            error: error.to_owned(),
        },
        &mut transition,
    );
    Some(transition)
}

/// Handles a step deadline: times the step out and fails the execution. `None` when the
/// deadline no longer applies (step ended, deadline moved, or a signal/approval blocks).
pub fn step_deadline(
    state: &ExecutionState,
    step_id: &StepId,
    now: Timestamp,
) -> Option<Transition> {
    if state.status.is_terminal() || state.hard_blocked() {
        return None;
    }
    let step = state.step(step_id)?;
    let deadline = step.deadline?;
    if step.status.is_terminal() || deadline > now {
        return None;
    }
    let mut transition = Transition::default();
    transition.event(NewEvent::step(step_id, EventBody::StepTimedOut {}));
    if step.remote {
        transition.effect(Effect::StepEnded {
            step_id: step_id.clone(),
            cancel_reason: Some("step timed out".to_owned()),
        });
    }
    cancel_steps(
        state,
        "sibling step timed out",
        Some(step_id),
        &mut transition,
    );
    transition.event(NewEvent::execution(EventBody::ExecutionFailed {
        error: "step timed out".to_owned(),
    }));
    if state.session.is_some() {
        transition.effect(Effect::PushToAgent(Push::execution_cancelled(&state.id)));
    }
    end_session(state, &mut transition);
    Some(transition)
}

/// Handles the execution deadline.
pub fn execution_deadline(
    state: &ExecutionState,
    deadline: Timestamp,
    now: Timestamp,
) -> Option<Transition> {
    if state.status.is_terminal() || deadline > now {
        return None;
    }
    let mut transition = Transition::default();
    let terminal = EventBody::ExecutionFailed {
        error: "execution exceeded maximum duration".to_owned(),
    };
    terminate(state, "execution timed out", terminal, &mut transition);
    Some(transition)
}

/// Handles the loss of the consumer holding the session (after the disconnect grace). A
/// running execution goes back to pending; a blocked one keeps its session for a reconnect.
pub fn consumer_lost(
    state: &ExecutionState,
    consumer_id: &ConsumerId,
    reason: &str,
) -> Option<Transition> {
    let session = state
        .session
        .as_ref()
        .filter(|session| session.consumer_id == consumer_id)?;
    if state.status.is_terminal() {
        return None;
    }
    let mut transition = Transition::default();
    if !state.session_lost {
        transition.event(NewEvent::execution(EventBody::AgentTimeout {
            session_id: session.id.clone(),
        }));
    }
    if state.hard_blocked() {
        return (!transition.events.is_empty()).then_some(transition);
    }
    let reset_transition = reset(state, reason);
    transition.events.extend(reset_transition.events);
    transition.effects.extend(reset_transition.effects);
    Some(transition)
}

/// Returns the events that put a running execution back to `pending`.
pub fn reset(state: &ExecutionState, reason: &str) -> Transition {
    let mut transition = Transition::default();
    // An at-most-once job a runner got may have run: the re-run must not make the call again
    // blindly (its matching call waits for an operator's answer, docs/failure-semantics.md).
    for step in state.active_steps().filter(|step| {
        step.remote && step.at_most_once && !step.outcome_unknown && step.delivered()
    }) {
        transition.event(NewEvent::step(
            &step.id,
            EventBody::StepOutcomeUnknown {
                runner_id: step.runner_id.clone(),
                reason: "agent lost while a runner held the job".to_owned(),
            },
        ));
    }
    cancel_steps(state, "agent disconnected", None, &mut transition);
    transition.event(NewEvent::execution(EventBody::ExecutionReset {
        reason: reason.to_owned(),
        from_status: state.status.as_str().to_owned(),
    }));
    end_session(state, &mut transition);
    transition.effect(Effect::BecamePending);
    transition
}
