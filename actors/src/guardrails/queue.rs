//! The pending queue of an agent group: executions waiting for a consumer, offered highest
//! priority first and, within one priority, in the order they arrived. An execution keeps its
//! place while it is being offered, so one whose offer failed goes back where it was.

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap};

use crate::ids::ExecutionId;

/// Queue order: priority descending, then arrival.
type Place = (Reverse<i64>, u64);

/// Pending executions of one agent.
#[derive(Debug, Default)]
pub struct PendingQueue {
    /// Executions waiting to be offered, in offer order.
    waiting: BTreeSet<(Place, ExecutionId)>,
    /// Every execution known to the queue (waiting or being offered) and its place.
    places: HashMap<ExecutionId, Place>,
    /// Arrival counter.
    arrivals: u64,
}

impl PendingQueue {
    /// Adds an execution unless it is known already (waiting or being offered); returns
    /// whether it was added.
    pub fn push(&mut self, id: ExecutionId, priority: i64) -> bool {
        if self.places.contains_key(&id) {
            return false;
        }
        let place = (Reverse(priority), self.arrivals);
        self.arrivals += 1;
        self.places.insert(id.clone(), place);
        self.waiting.insert((place, id));
        true
    }

    /// Takes the next execution to offer; it stays known until [`Self::forget`] or
    /// [`Self::put_back`].
    pub fn pop(&mut self) -> Option<ExecutionId> {
        self.waiting.pop_first().map(|(_, id)| id)
    }

    /// Puts an execution taken by [`Self::pop`] back at its place.
    pub fn put_back(&mut self, id: ExecutionId) {
        if let Some(place) = self.places.get(&id) {
            self.waiting.insert((*place, id));
        }
    }

    /// Drops an execution (assigned, or no longer pending).
    pub fn forget(&mut self, id: &ExecutionId) {
        if let Some(place) = self.places.remove(id) {
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

#[cfg(test)]
#[path = "queue_tests.rs"]
mod tests;
