//! The execution state machine: pure functions from (state, command) to the events to record,
//! the effects to perform once they are durable, and the reply. Nothing here does I/O; the
//! actor commits the events, applies them with [`ExecutionState::apply`] and runs the effects.

mod approvals;
mod intents;
mod invoke;
mod lifecycle;
mod llm;
mod progress;
mod replays;
mod signals;
mod steps;

use super::commands::Effect;
use super::state::{ExecutionState, StepState};
use crate::events::{EventBody, NewEvent, ResumeReason};
use crate::ids::StepId;
use crate::time::Timestamp;
use std::time::Duration;
/// Longest `error` kept from a `fail` intent, in bytes (WIRE.md corrections, item 8).
pub const MAX_FAIL_ERROR_BYTES: usize = 4096;
/// Most `history` entries sent with an assignment.
pub const HISTORY_MAX_ENTRIES: usize = 50;
/// Largest JSON size of the `history` sent with an assignment.
pub const HISTORY_MAX_BYTES: usize = 512 * 1024;

/// Events to record and effects to run for one accepted command.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Transition {
    /// Events, in order; recorded atomically.
    pub events: Vec<NewEvent>,
    /// Effects, run after the events are durable, in order.
    pub effects: Vec<Effect>,
}

impl Transition {
    fn event(&mut self, event: NewEvent) {
        self.events.push(event);
    }

    fn effect(&mut self, effect: Effect) {
        self.effects.push(effect);
    }
}

fn end_session(state: &ExecutionState, transition: &mut Transition) {
    if let Some(session) = &state.session {
        transition.effect(Effect::SessionEnded {
            consumer_id: session.consumer_id.clone(),
        });
    }
}

fn add(at: Timestamp, duration: Duration) -> Timestamp {
    chrono::Duration::from_std(duration)
        .ok()
        .and_then(|delta| at.checked_add_signed(delta))
        .unwrap_or(at)
}

/// Returns whether a step counts as an active tool step (a blocker of kind `tool`).
fn tool_active(step: &StepState) -> bool {
    !step.status.is_terminal() && !step.awaiting_approval
}

/// Adds `execution.resumed` (step completed) when ending `ended` leaves no active tool step.
fn resume_if_last_tool(state: &ExecutionState, ended: &[&StepId], transition: &mut Transition) {
    if !state.tool_blocked {
        return;
    }
    let others_active = state
        .steps
        .iter()
        .any(|step| tool_active(step) && !ended.contains(&&step.id));
    if !others_active {
        transition.event(NewEvent::execution(EventBody::ExecutionResumed {
            reason: ResumeReason::StepCompleted,
        }));
    }
}

/// Cancels every active step with `reason`, adding the events and runner notices.
fn cancel_steps(
    state: &ExecutionState,
    reason: &str,
    except: Option<&StepId>,
    transition: &mut Transition,
) {
    for step in state.active_steps() {
        if Some(&step.id) == except {
            continue;
        }
        transition.event(NewEvent::step(
            &step.id,
            EventBody::StepCancelled {
                reason: reason.to_owned(),
            },
        ));
        if step.remote {
            transition.effect(Effect::StepEnded {
                step_id: step.id.clone(),
                cancel_reason: Some(reason.to_owned()),
            });
        }
    }
}

pub use intents::{
    assign, check_session, create, fail_text, intent, precheck_intent, proposed_intent,
};
pub use lifecycle::{
    cancel, consumer_lost, execution_deadline, fail_by_kernel, reset, step_deadline,
};
pub use llm::{BUDGET_APPROVE, budget_wait, budget_wait_timed_out, llm_called};
pub use progress::{Progress, step_progress};
pub use replays::{
    ReplayedCall, replay_call, replay_wait, replayable, replayable_signal, reusable_grant,
};
pub use signals::{approval_expired, signal};
pub use steps::{
    RUNNER_LOST_ERROR, Reconciliation, agent_step_result, claim_job, jittered_retry_delay,
    reconcile, retry_delay, runner_lost, runner_result, step_started, tool_error_text,
};
