//! The pending queue of an agent group: executions waiting for a consumer, offered highest
//! priority first and, within one priority, in the order they arrived. An execution keeps its
//! place while it is being offered, so one whose offer failed goes back where it was. Each
//! execution's labels are kept with it: one whose label value is at its limit is skipped over
//! ([`PendingQueue::pop_admitted`]) and keeps its place before those behind it.

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap};
use std::ops::Bound;

use super::concurrency::Labels;
use crate::ids::ExecutionId;

/// Queue order: priority descending, then arrival.
type Place = (Reverse<i64>, u64);

/// Pending executions of one agent.
#[derive(Debug, Default)]
pub struct PendingQueue {
    /// Executions waiting to be offered, in offer order.
    waiting: BTreeSet<(Place, ExecutionId)>,
    /// Every execution known to the queue (waiting or being offered), its place and labels.
    places: HashMap<ExecutionId, (Place, Labels)>,
    /// Arrival counter.
    arrivals: u64,
}

impl PendingQueue {
    /// Adds an execution unless it is known already (waiting or being offered); returns
    /// whether it was added.
    pub fn push(&mut self, id: ExecutionId, priority: i64, labels: Labels) -> bool {
        if self.places.contains_key(&id) {
            return false;
        }
        let place = (Reverse(priority), self.arrivals);
        self.arrivals += 1;
        self.places.insert(id.clone(), (place, labels));
        self.waiting.insert((place, id));
        true
    }

    /// Takes the next execution to offer; it stays known until [`Self::forget`] or
    /// [`Self::put_back`].
    pub fn pop(&mut self) -> Option<ExecutionId> {
        self.waiting.pop_first().map(|(_, id)| id)
    }

    /// Takes the first waiting execution after `cursor`, in offer order, whose labels
    /// `admits`, with its labels; those skipped keep their places. `cursor` moves past every
    /// execution looked at, so repeated calls with one cursor read the queue once (within one
    /// pass, what was refused stays refused: slots are only taken).
    pub fn pop_admitted(
        &mut self,
        cursor: &mut Cursor,
        admits: impl Fn(&Labels) -> bool,
    ) -> Option<(ExecutionId, Labels)> {
        let start = cursor
            .0
            .as_ref()
            .map_or(Bound::Unbounded, |after| Bound::Excluded(after.clone()));
        let mut found = None;
        for entry in self.waiting.range((start, Bound::Unbounded)) {
            cursor.0 = Some(entry.clone());
            let labels = self.labels(&entry.1);
            if admits(&labels) {
                found = Some((entry.clone(), labels));
                break;
            }
        }
        let (entry, labels) = found?;
        self.waiting.remove(&entry);
        Some((entry.1, labels))
    }

    /// Returns the labels of a known execution (`None` for one without labels or unknown).
    pub fn labels(&self, id: &ExecutionId) -> Labels {
        self.places.get(id).and_then(|(_, labels)| labels.clone())
    }

    /// Returns the labels of the waiting executions that have labels, in no particular order.
    pub fn waiting_labels(&self) -> impl Iterator<Item = &Labels> {
        self.waiting
            .iter()
            .filter_map(|(_, id)| self.places.get(id).map(|(_, labels)| labels))
            .filter(|labels| labels.is_some())
    }

    /// Puts an execution taken by [`Self::pop`] back at its place.
    pub fn put_back(&mut self, id: ExecutionId) {
        if let Some((place, _)) = self.places.get(&id) {
            self.waiting.insert((*place, id));
        }
    }

    /// Drops an execution (assigned, or no longer pending).
    pub fn forget(&mut self, id: &ExecutionId) {
        if let Some((place, _)) = self.places.remove(id) {
            self.waiting.remove(&(place, id.clone()));
            crate::shrink::relax(&mut self.places);
        }
    }

    /// Returns whether the execution is known (waiting or being offered).
    pub fn contains(&self, id: &ExecutionId) -> bool {
        self.places.contains_key(id)
    }

    /// Executions known (waiting or being offered).
    pub fn len(&self) -> usize {
        self.places.len()
    }

    /// Whether no execution is known.
    pub fn is_empty(&self) -> bool {
        self.places.is_empty()
    }

    /// Executions waiting to be offered.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// The executions waiting to be offered, in offer order.
    pub fn waiting_ids(&self) -> Vec<ExecutionId> {
        self.waiting.iter().map(|(_, id)| id.clone()).collect()
    }
}

/// Where a pass over the queue has got to ([`PendingQueue::pop_admitted`]); the default
/// starts at the head.
#[derive(Debug, Default)]
pub struct Cursor(Option<(Place, ExecutionId)>);

#[cfg(test)]
#[path = "queue_tests.rs"]
mod tests;
