//! The agent's running slots (`concurrency.max_running` and `concurrency.labels`,
//! docs/guardrails.md): executions assigned and not yet terminal or reset hold a slot, and one
//! of each limited label value they carry; blocked ones keep theirs (they still hold a session
//! and go on without a new offer). Offers in flight hold them too, so at most `max_running`
//! executions (per label value: its `max_running`) are ever running or being assigned.

use std::collections::HashMap;

use super::{Group, GroupEffect, OFFERS_IN_FLIGHT, Outlet};
use crate::guardrails::concurrency::{LabelUse, Labels, RunningLimits};
use crate::guardrails::queue::Cursor;
use crate::ids::{ConsumerId, ExecutionId};

impl<O: Outlet> Group<O> {
    /// Sets `max_running` (`None`: unlimited) and offers what a raised limit lets through.
    pub fn set_running_limit(&mut self, limit: Option<u32>) -> Vec<GroupEffect> {
        let mut effects = Vec::new();
        self.slots.set_limit(limit);
        self.assign_pending(&mut effects);
        effects
    }

    /// Sets every running limit (`max_running` and per label value) and offers what raised
    /// limits let through.
    pub fn set_running_limits(&mut self, limits: RunningLimits) -> Vec<GroupEffect> {
        let mut effects = Vec::new();
        self.slots.set_limits(limits);
        self.assign_pending(&mut effects);
        effects
    }

    /// Returns, per limited label key, its limit, the slots in use (all values) and the pending
    /// executions held back because their value of it is full (empty without label limits).
    /// An execution held back by several full label values counts under the first limited key.
    pub fn label_slots(&self) -> Vec<(LabelUse, usize)> {
        if !self.slots.has_label_limits() {
            return Vec::new();
        }
        let mut held_back: HashMap<&str, usize> = HashMap::new();
        for labels in self.pending.waiting_labels() {
            if let Some(label) = self.slots.full_label(labels) {
                *held_back.entry(label).or_default() += 1;
            }
        }
        self.slots
            .label_use()
            .into_iter()
            .map(|used| {
                let waiting = held_back.get(used.label.as_str()).copied().unwrap_or(0);
                (used, waiting)
            })
            .collect()
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
    pub fn load_running(&mut self, running: impl IntoIterator<Item = (ExecutionId, Labels)>) {
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

    /// Offers pending executions to connected consumers, round-robin, a bounded number at a
    /// time and no more than the agent's free running slots. An execution whose label value is
    /// at its limit is skipped (it keeps its place, ahead of those behind it) in one pass over
    /// the queue.
    pub(super) fn assign_pending(&mut self, effects: &mut Vec<GroupEffect>) {
        let mut cursor = Cursor::default();
        while self.offering.len() < OFFERS_IN_FLIGHT
            && !self.connected.is_empty()
            && self.slots.admits(self.offering.len())
        {
            let slots = &self.slots;
            let admits = |labels: &Labels| slots.full_label(labels).is_none();
            let Some((execution_id, labels)) = self.pending.pop_admitted(&mut cursor, admits)
            else {
                return;
            };
            self.slots.offer_started(execution_id.clone(), labels);
            let consumer_id = self
                .connected
                .keys()
                .nth(self.next_consumer % self.connected.len())
                .cloned()
                .unwrap_or_default();
            self.next_consumer = self.next_consumer.wrapping_add(1);
            self.offering.insert(execution_id.clone());
            effects.push(GroupEffect::Offer {
                execution_id,
                consumer_id,
            });
        }
    }
}
