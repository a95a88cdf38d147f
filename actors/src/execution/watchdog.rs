//! The stall watchdog's decisions, pure like the state machine: when an execution or one of its
//! remote jobs counts as stalled, and the informational `execution.stalled` events recording
//! each occurrence once. The execution actor arms a timer for every [`due_times`] entry and
//! calls [`check`] when one fires.

use super::commands::ExecutionSettings;
use super::machine::Transition;
use super::state::ExecutionState;
use crate::events::{EventBody, NewEvent};
use crate::status::{ExecutionStatus, StepStatus};
use crate::time::Timestamp;

/// Reason of a `running` execution that recorded no intent for `stall_after`.
pub const NO_INTENT: &str = "no_intent";
/// Reason of a dispatched remote job that was not started within `job_start_timeout`.
pub const JOB_NOT_STARTED: &str = "job_not_started";

/// Every stall not recorded yet, with the time it becomes due.
fn candidates(state: &ExecutionState, settings: &ExecutionSettings) -> Vec<(Timestamp, EventBody)> {
    let mut found = Vec::new();
    if state.status.is_terminal() {
        return found;
    }
    if state.status == ExecutionStatus::Running
        && !settings.stall_after.is_zero()
        && state.stall_reported_since != Some(state.idle_since)
    {
        let body = EventBody::ExecutionStalled {
            reason: NO_INTENT.to_owned(),
            step_id: None,
            runner_id: None,
            since: state.idle_since,
        };
        found.push((add(state.idle_since, settings.stall_after), body));
    }
    if settings.job_start_timeout.is_zero() {
        return found;
    }
    for step in state.active_steps() {
        let Some(since) = step.dispatched_at else {
            continue;
        };
        if !step.remote
            || step.status != StepStatus::Dispatched
            || step.awaiting_approval
            || step.stall_reported
        {
            continue;
        }
        let body = EventBody::ExecutionStalled {
            reason: JOB_NOT_STARTED.to_owned(),
            step_id: Some(step.id.clone()),
            runner_id: step.runner_id.clone(),
            since,
        };
        found.push((add(since, settings.job_start_timeout), body));
    }
    found
}

/// Returns when each stall not recorded yet becomes due (for the actor's timers).
pub fn due_times(state: &ExecutionState, settings: &ExecutionSettings) -> Vec<Timestamp> {
    candidates(state, settings)
        .into_iter()
        .map(|(due, _)| due)
        .collect()
}

/// Returns the `execution.stalled` events of every stall due at `now` and not recorded yet.
pub fn check(
    state: &ExecutionState,
    now: Timestamp,
    settings: &ExecutionSettings,
) -> Option<Transition> {
    let events: Vec<NewEvent> = candidates(state, settings)
        .into_iter()
        .filter(|(due, _)| *due <= now)
        .map(|(_, body)| NewEvent::execution(body))
        .collect();
    (!events.is_empty()).then(|| Transition {
        events,
        effects: Vec::new(),
    })
}

use crate::time::add;
