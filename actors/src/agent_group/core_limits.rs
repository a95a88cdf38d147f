//! The agent's running slots (`concurrency.max_running`, docs/guardrails.md): executions
//! assigned and not yet terminal or reset hold a slot; blocked ones keep theirs (they still hold
//! a session and go on without a new offer). Offers in flight hold one too, so at most
//! `max_running` executions are ever running or being assigned.

use super::{Group, GroupEffect, Outlet};
use crate::ids::{ConsumerId, ExecutionId};

impl<O: Outlet> Group<O> {
    /// Sets `max_running` (`None`: unlimited) and offers what a raised limit lets through.
    pub fn set_running_limit(&mut self, limit: Option<u32>) -> Vec<GroupEffect> {
        let mut effects = Vec::new();
        self.slots.set_limit(limit);
        self.assign_pending(&mut effects);
        effects
    }

    /// Returns `max_running` in force, the slots in use (offers in flight included) and the
    /// pending executions held back because none is free.
    pub fn running_slots(&self) -> (Option<u32>, usize, usize) {
        let held_back = if self.slots.admits(self.offering.len()) {
            0
        } else {
            self.pending.waiting()
        };
        (
            self.slots.limit(),
            self.slots.in_use() + self.offering.len(),
            held_back,
        )
    }

    /// Adds executions found running or blocked in the store (a group starting): they hold
    /// their slots until their sessions end.
    pub fn load_running(&mut self, running: impl IntoIterator<Item = ExecutionId>) {
        self.slots.load(running);
    }

    /// An execution's session ended (terminal, or reset to `pending`): its running slot frees
    /// and the next pending execution may be offered.
    pub fn session_ended(
        &mut self,
        consumer_id: &ConsumerId,
        execution_id: &ExecutionId,
    ) -> Vec<GroupEffect> {
        let mut effects = Vec::new();
        if let Some(bound) = self.bindings.get_mut(consumer_id) {
            bound.remove(execution_id);
            if bound.is_empty() {
                self.bindings.remove(consumer_id);
            }
        }
        let offering = self.offering.contains(execution_id);
        if self.slots.release(execution_id, offering) {
            self.assign_pending(&mut effects);
        }
        effects
    }
}
