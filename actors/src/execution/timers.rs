//! The timers of one execution actor: its wake-up and the passivation idle check. Each is a
//! `send_after` task; the handles are kept so that every timer is aborted when the actor stops.
//! A sleeping timer holds a reference to its actor: left behind, a five-minute stall check
//! would keep a finished execution's actor in memory.
//!
//! The wake-up is one timer for everything the actor must do at a time of its own: the
//! execution deadline, the deadline of a step and the stalls the watchdog records. It is due no
//! later than the earliest of them (`effects::arm_wake`). Each intent moves the next stall
//! later and each new step's deadline falls after the earlier steps' ones, so a wake-up armed
//! earlier is kept rather than replaced: it fires early, finds nothing due, and is armed again
//! from the state of then. An execution that keeps working costs one timer per period instead
//! of one for its deadline, one for the stall check and one per step, each spawned and the
//! step ones aborted (seven per execution of the K=5 job before, two now; docs/benchmarks.md).

use ractor::ActorRef;

use super::messages::ExecutionMsg;
use crate::time::Timestamp;

type Handle = ractor::concurrency::JoinHandle<Result<(), ractor::MessagingErr<ExecutionMsg>>>;

/// The armed timers of an execution actor.
#[derive(Default)]
pub(super) struct Timers {
    wake: Option<(Timestamp, Handle)>,
    idle: Option<Handle>,
}

fn arm(
    myself: &ActorRef<ExecutionMsg>,
    now: Timestamp,
    at: Timestamp,
    message: impl FnOnce() -> ExecutionMsg + Send + 'static,
) -> Handle {
    let delay = (at - now).to_std().unwrap_or_default();
    myself.send_after(delay, message)
}

impl Timers {
    /// Keeps the wake-up due no later than `earliest`, the earliest time the actor has
    /// something to do; see the module documentation.
    pub fn sync_wake(
        &mut self,
        myself: &ActorRef<ExecutionMsg>,
        now: Timestamp,
        earliest: Option<Timestamp>,
    ) {
        let armed = self.wake.as_ref().map(|(due, _)| *due);
        if let CheckPlan::Arm(due) = check_plan(armed, earliest) {
            if let Some((_, previous)) = self.wake.take() {
                previous.abort();
            }
            self.wake = Some((due, arm(myself, now, due, || ExecutionMsg::Wake)));
        }
    }

    /// Forgets the wake-up if it fired by `now`.
    pub fn woke(&mut self, now: Timestamp) {
        if self.wake.as_ref().is_some_and(|(due, _)| *due <= now) {
            self.wake = None;
        }
    }

    /// Arms the passivation idle check for `epoch` (replacing an earlier one).
    pub fn arm_idle(
        &mut self,
        myself: &ActorRef<ExecutionMsg>,
        delay: std::time::Duration,
        epoch: u64,
    ) {
        if let Some(previous) = self.idle.take() {
            previous.abort();
        }
        self.idle = Some(myself.send_after(delay, move || ExecutionMsg::IdleCheck { epoch }));
    }

    /// Aborts the wake-up (the state was reloaded; it is armed again from it after the
    /// message being handled).
    pub fn clear_work(&mut self) {
        if let Some((_, handle)) = self.wake.take() {
            handle.abort();
        }
    }
}

/// What to do with the wake-up.
#[derive(Debug, PartialEq)]
enum CheckPlan {
    /// Leave it as it is (or without one).
    Keep,
    /// Arm one at this time, aborting the one armed.
    Arm(Timestamp),
}

/// Decides the wake-up from the one `armed` and the `earliest` time wanted. One due no later
/// than needed stays: firing early costs a message that finds nothing due. With nothing wanted
/// (a terminal execution) it stays too, and is gone when it fires or when the actor stops
/// (a terminal execution's does at once).
fn check_plan(armed: Option<Timestamp>, earliest: Option<Timestamp>) -> CheckPlan {
    match (armed, earliest) {
        (Some(armed), Some(earliest)) if armed <= earliest => CheckPlan::Keep,
        (_, Some(earliest)) => CheckPlan::Arm(earliest),
        (_, None) => CheckPlan::Keep,
    }
}

impl Drop for Timers {
    fn drop(&mut self) {
        if let Some(handle) = self.idle.take() {
            handle.abort();
        }
        self.clear_work();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_check_due_no_later_than_the_earliest_stall_is_kept_and_a_later_one_replaced() {
        let at = |seconds| {
            crate::time::add(
                Timestamp::UNIX_EPOCH,
                std::time::Duration::from_secs(seconds),
            )
        };
        // First wanted: armed.
        assert_eq!(check_plan(None, Some(at(300))), CheckPlan::Arm(at(300)));
        // Each intent moves the stall later: the earlier check stays.
        assert_eq!(check_plan(Some(at(300)), Some(at(301))), CheckPlan::Keep);
        assert_eq!(check_plan(Some(at(300)), Some(at(300))), CheckPlan::Keep);
        // A stall due sooner than the armed check (a remote job's): armed for it.
        assert_eq!(
            check_plan(Some(at(300)), Some(at(60))),
            CheckPlan::Arm(at(60))
        );
        // Nothing wanted (blocked): kept until it fires or the actor stops.
        assert_eq!(check_plan(Some(at(300)), None), CheckPlan::Keep);
        assert_eq!(check_plan(None, None), CheckPlan::Keep);
    }
}
