//! The timers of one execution actor: its deadline, the step deadline check and the stall
//! check. Each is a `send_after` task; the handles are kept so that every timer is aborted when
//! the actor stops. A sleeping timer holds a reference to its actor: left behind, a five-minute
//! stall check would keep a finished execution's actor in memory.
//!
//! The two checks are one timer each, due no later than the earliest thing they may have to
//! record: the stall check by the earliest stall the state can still record
//! (`watchdog::due_times`), the step check by the earliest deadline of the steps whose deadline
//! is enforced (`effects::enforced_step_deadlines`). Each intent moves the next stall later and
//! each new step's deadline is later than the last one's, so a check armed earlier is kept
//! rather than replaced: it fires early, finds nothing due, and is armed again from the state
//! of then. An execution that keeps working costs one timer per period instead of a spawned
//! and aborted task per intent and per step (eleven per execution of the K=5 job;
//! docs/benchmarks.md).

use ractor::ActorRef;

use super::messages::ExecutionMsg;
use crate::time::Timestamp;

type Handle = ractor::concurrency::JoinHandle<Result<(), ractor::MessagingErr<ExecutionMsg>>>;

/// The armed timers of an execution actor.
#[derive(Default)]
pub(super) struct Timers {
    deadline: Option<(Timestamp, Handle)>,
    steps: Check,
    check: Check,
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

    /// Keeps the step deadline check due no later than `earliest`, the earliest deadline
    /// enforced now; see the module documentation.
    pub fn sync_steps(
        &mut self,
        myself: &ActorRef<ExecutionMsg>,
        now: Timestamp,
        earliest: Option<Timestamp>,
    ) {
        keep_check(&mut self.steps, myself, now, earliest, || {
            ExecutionMsg::StepDeadlinesDue
        });
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

    /// Forgets the step deadline check if it fired by `now`.
    pub fn steps_fired(&mut self, now: Timestamp) {
        forget_fired(&mut self.steps, now);
    }

    /// Keeps the stall check due no later than the earliest of `wanted` (due times of the
    /// stalls not recorded yet); see the module documentation.
    pub fn sync_checks(
        &mut self,
        myself: &ActorRef<ExecutionMsg>,
        now: Timestamp,
        wanted: Vec<Timestamp>,
    ) {
        let earliest = wanted.into_iter().min();
        keep_check(&mut self.check, myself, now, earliest, || {
            ExecutionMsg::StallCheck
        });
    }

    /// Forgets the stall check if it fired by `now`.
    pub fn checks_fired(&mut self, now: Timestamp) {
        forget_fired(&mut self.check, now);
    }

    /// Aborts the step deadline check and the stall check (the state was reloaded; they are
    /// re-armed from it after the next message). The deadline does not depend on the state.
    pub fn clear_work(&mut self) {
        for (_, handle) in [self.steps.take(), self.check.take()].into_iter().flatten() {
            handle.abort();
        }
    }
}

type Check = Option<(Timestamp, Handle)>;

/// Keeps the check in `slot` due no later than `earliest` (`check_plan`), arming `message`.
fn keep_check(
    slot: &mut Check,
    myself: &ActorRef<ExecutionMsg>,
    now: Timestamp,
    earliest: Option<Timestamp>,
    message: fn() -> ExecutionMsg,
) {
    let armed = slot.as_ref().map(|(due, _)| *due);
    if let CheckPlan::Arm(due) = check_plan(armed, earliest) {
        if let Some((_, previous)) = slot.take() {
            previous.abort();
        }
        *slot = Some((due, arm(myself, now, due, message)));
    }
}

/// Forgets the check in `slot` if it was due by `now` (it fired).
fn forget_fired(slot: &mut Check, now: Timestamp) {
    if slot.as_ref().is_some_and(|(due, _)| *due <= now) {
        *slot = None;
    }
}

/// What to do with a check (the stall check or the step deadline check).
#[derive(Debug, PartialEq)]
enum CheckPlan {
    /// Leave it as it is (or without one).
    Keep,
    /// Arm one at this time, aborting the one armed.
    Arm(Timestamp),
}

/// Decides a check from the one `armed` and the `earliest` time wanted. A check due no later
/// than needed stays: firing early costs a message that finds nothing due. With nothing wanted
/// (a blocked execution, no step in flight) it stays too, and is gone when it fires or when the
/// actor stops (a terminal execution's does at once).
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
