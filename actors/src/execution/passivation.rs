//! Passivation: an execution that only waits gives its actor back. It becomes a row in the store
//! plus an entry in its agent group's queue (pending) or a session binding (blocked), and a
//! wake-up time in the supervisor's index; the next message that concerns it rebuilds the actor.
//!
//! The hand-over is a three-step exchange so that no message is lost and no two actors ever own
//! one execution: the idle actor offers to stop (`Idle`), the supervisor takes it out of the
//! directory (new activations now wait) and answers `Passivate`, and the actor stops only if it
//! handled nothing in between — otherwise it tells the supervisor `StillBusy` and stays.

use ractor::ActorRef;

use super::actor::ExecutionActorState;
use super::effects::add;
use super::messages::ExecutionMsg;
use super::messages::ExecutionSupervisorMsg;
use super::state::ExecutionState;
use crate::status::ExecutionStatus;
use crate::time::Timestamp;

/// Whether an execution only waits for something from outside (an agent to take it, a signal,
/// an approval) with no tool step in flight and no timer of its own but its deadline.
pub fn waits(exec: &ExecutionState) -> bool {
    match exec.status {
        ExecutionStatus::Pending => true,
        ExecutionStatus::Blocked => {
            exec.hard_blocked() && exec.active_steps().all(|step| step.awaiting_approval)
        }
        _ => false,
    }
}

/// When a passivated execution must be woken: its execution deadline or the expiry of the
/// approval it waits for, whichever comes first (step deadlines are suspended while it is
/// hard-blocked).
pub fn wake_at(exec: &ExecutionState, execution_timeout: std::time::Duration) -> Option<Timestamp> {
    let deadline = (!exec.status.is_terminal()).then(|| add(exec.created_at, execution_timeout));
    deadline.map(|deadline| {
        exec.approval_expiry()
            .map_or(deadline, |expiry| expiry.min(deadline))
    })
}

/// Arms an idle check when the execution waits and none is armed for the current epoch.
pub(super) fn consider(myself: &ActorRef<ExecutionMsg>, state: &mut ExecutionActorState) {
    let Some(delay) = state.ctx.config.passivate_after else {
        return;
    };
    if state.stale || !waits(&state.exec) || state.idle_armed == Some(state.epoch) {
        return;
    }
    state.idle_armed = Some(state.epoch);
    let epoch = state.epoch;
    if delay.is_zero() {
        let _ = myself.send_message(ExecutionMsg::IdleCheck { epoch });
    } else {
        state.timers.arm_idle(myself, delay, epoch);
    }
}

/// Handles the passivation messages; returns every other message untouched.
pub(super) fn intercept(
    myself: &ActorRef<ExecutionMsg>,
    message: ExecutionMsg,
    state: &mut ExecutionActorState,
) -> Option<ExecutionMsg> {
    match message {
        ExecutionMsg::IdleCheck { epoch } => {
            if epoch == state.epoch && !state.stale && waits(&state.exec) {
                let offer = ExecutionSupervisorMsg::Idle {
                    id: state.exec.id.clone(),
                    actor: myself.get_id(),
                    epoch,
                    wake_at: wake_at(&state.exec, state.ctx.config.execution.execution_timeout),
                };
                tell_supervisor(myself, offer);
            }
            None
        }
        ExecutionMsg::Passivate { epoch } => {
            if epoch == state.epoch && !state.stale && waits(&state.exec) {
                myself.stop(Some("passivated".into()));
            } else {
                let busy = ExecutionSupervisorMsg::StillBusy {
                    id: state.exec.id.clone(),
                    actor: myself.get_id(),
                };
                tell_supervisor(myself, busy);
            }
            None
        }
        other => Some(other),
    }
}

/// Sends to the execution supervisor (the actor's parent). An actor spawned without one (a
/// test harness) is never passivated.
fn tell_supervisor(myself: &ActorRef<ExecutionMsg>, message: ExecutionSupervisorMsg) {
    if let Some(supervisor) = myself.try_get_supervisor() {
        let _ = supervisor.send_message(message);
    }
}
