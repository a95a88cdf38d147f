//! The timers of one execution actor: its deadline, one per active step, and the stall checks.
//! Each is a `send_after` task; the handles are kept so that a timer no longer wanted (a step
//! that ended, a stall check superseded by a newer intent) is aborted at once, and every timer
//! is aborted when the actor stops. A sleeping timer holds a reference to its actor: left
//! behind, a five-minute stall check would keep a finished execution's actor in memory.

use std::collections::{BTreeMap, HashMap};

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
    checks: BTreeMap<Timestamp, Handle>,
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

    /// Makes the stall checks exactly `wanted` (their due times).
    pub fn sync_checks(
        &mut self,
        myself: &ActorRef<ExecutionMsg>,
        now: Timestamp,
        wanted: Vec<Timestamp>,
    ) {
        self.checks.retain(|due, handle| {
            let keep = wanted.contains(due);
            if !keep {
                handle.abort();
            }
            keep
        });
        for due in wanted {
            self.checks
                .entry(due)
                .or_insert_with(|| arm(myself, now, due, || ExecutionMsg::StallCheck));
        }
    }

    /// Forgets the stall checks that fired by `now`.
    pub fn checks_fired(&mut self, now: Timestamp) {
        self.checks.retain(|due, _| *due > now);
    }

    /// Aborts the step timers and stall checks (the state was reloaded; they are re-armed
    /// from it after the next message). The deadline does not depend on the state.
    pub fn clear_work(&mut self) {
        for (_, (_, handle)) in self.steps.drain() {
            handle.abort();
        }
        for (_, handle) in std::mem::take(&mut self.checks) {
            handle.abort();
        }
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
