//! The timers of one execution actor: its deadline, one per active step, and the stall check.
//! Each is a `send_after` task; the handles are kept so that a timer no longer wanted (a step
//! that ended) is aborted at once, and every timer is aborted when the actor stops. A sleeping
//! timer holds a reference to its actor: left behind, a five-minute stall check would keep a
//! finished execution's actor in memory.
//!
//! The stall check is one timer, due no later than the earliest stall the state can still
//! record (`watchdog::due_times`). Every intent moves that time later, so a check armed
//! earlier is kept rather than replaced: it fires early, finds nothing due, and is armed again
//! from the state of then. An execution that keeps sending intents costs one check per stall
//! period instead of a spawned and aborted task per intent (six per execution of the K=5 job;
//! docs/benchmarks.md).

use std::collections::HashMap;

use ractor::ActorRef;

use super::messages::ExecutionMsg;
use crate::ids::StepId;
use crate::time::Timestamp;

type Handle = ractor::concurrency::JoinHandle<Result<(), ractor::MessagingErr<ExecutionMsg>>>;

/// The armed timers of an execution actor.
#[derive(Default)]
pub(super) struct Timers {
    deadline: Option<(Timestamp, Handle)>,
    steps: HashMap<StepId, (Timestamp, Handle)>,
    check: Option<(Timestamp, Handle)>,
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
    /// Arms the execution deadline at `at` (replacing an earlier one).
    pub fn arm_deadline(&mut self, myself: &ActorRef<ExecutionMsg>, now: Timestamp, at: Timestamp) {
        if let Some((_, previous)) = self.deadline.take() {
            previous.abort();
        }
        let handle = arm(myself, now, at, || ExecutionMsg::ExecutionDeadlineReached);
        self.deadline = Some((at, handle));
    }

    /// Makes the step timers exactly `wanted`: aborts those of steps no longer listed or whose
    /// deadline moved, arms the missing ones.
    pub fn sync_steps(
        &mut self,
        myself: &ActorRef<ExecutionMsg>,
        now: Timestamp,
        wanted: Vec<(StepId, Timestamp)>,
    ) {
        let wanted: HashMap<StepId, Timestamp> = wanted.into_iter().collect();
        self.steps.retain(|step_id, (at, handle)| {
            let keep = wanted.get(step_id) == Some(at);
            if !keep {
                handle.abort();
            }
            keep
        });
        for (step_id, at) in wanted {
            if self.steps.contains_key(&step_id) {
                continue;
            }
            let id = step_id.clone();
            let handle = arm(myself, now, at, move || ExecutionMsg::StepDeadlineReached {
                step_id: id,
            });
            self.steps.insert(step_id, (at, handle));
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

    /// Forgets a step timer that fired.
    pub fn step_fired(&mut self, step_id: &StepId) {
        self.steps.remove(step_id);
    }

    /// Keeps the stall check due no later than the earliest of `wanted` (due times of the
    /// stalls not recorded yet); see the module documentation.
    pub fn sync_checks(
        &mut self,
        myself: &ActorRef<ExecutionMsg>,
        now: Timestamp,
        wanted: Vec<Timestamp>,
    ) {
        let armed = self.check.as_ref().map(|(due, _)| *due);
        match check_plan(armed, wanted.into_iter().min()) {
            CheckPlan::Keep => {}
            CheckPlan::Arm(due) => {
                if let Some((_, previous)) = self.check.take() {
                    previous.abort();
                }
                let handle = arm(myself, now, due, || ExecutionMsg::StallCheck);
                self.check = Some((due, handle));
            }
        }
    }

    /// Forgets the stall check if it fired by `now`.
    pub fn checks_fired(&mut self, now: Timestamp) {
        if self.check.as_ref().is_some_and(|(due, _)| *due <= now) {
            self.check = None;
        }
    }

    /// Aborts the step timers and the stall check (the state was reloaded; they are re-armed
    /// from it after the next message). The deadline does not depend on the state.
    pub fn clear_work(&mut self) {
        for (_, (_, handle)) in self.steps.drain() {
            handle.abort();
        }
        if let Some((_, handle)) = self.check.take() {
            handle.abort();
        }
    }
}

/// What to do with the stall check.
#[derive(Debug, PartialEq)]
enum CheckPlan {
    /// Leave it as it is (or without one).
    Keep,
    /// Arm one at this time, aborting the one armed.
    Arm(Timestamp),
}

/// Decides the stall check from the one `armed` and the `earliest` stall wanted. A check due
/// no later than needed stays: firing early costs a message that finds nothing due. With no
/// stall wanted (a blocked execution) it stays too, and is gone when it fires or when the actor
/// stops (a terminal execution's does at once).
fn check_plan(armed: Option<Timestamp>, earliest: Option<Timestamp>) -> CheckPlan {
    match (armed, earliest) {
        (Some(armed), Some(earliest)) if armed <= earliest => CheckPlan::Keep,
        (_, Some(earliest)) => CheckPlan::Arm(earliest),
        (_, None) => CheckPlan::Keep,
    }
}

impl Drop for Timers {
    fn drop(&mut self) {
        if let Some((_, handle)) = self.deadline.take() {
            handle.abort();
        }
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
