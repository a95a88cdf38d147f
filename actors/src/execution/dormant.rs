//! The index of passivated executions' deadlines: one ordered set for the whole kernel instead
//! of a sleeping timer per waiting execution. The execution supervisor owns it, arms a single
//! `send_after` for the earliest entry, and wakes (rebuilds) each execution whose time came;
//! the rebuilt actor arms its own timers and decides what is due.

use std::collections::{BTreeSet, HashMap};

use crate::ids::ExecutionId;
use crate::time::Timestamp;

/// When each passivated execution must be woken up.
#[derive(Debug, Default)]
pub struct WakeIndex {
    by_time: BTreeSet<(Timestamp, ExecutionId)>,
    by_id: HashMap<ExecutionId, Timestamp>,
}

impl WakeIndex {
    /// Records (or moves) the wake-up time of an execution.
    pub fn insert(&mut self, id: ExecutionId, at: Timestamp) {
        if let Some(previous) = self.by_id.insert(id.clone(), at) {
            self.by_time.remove(&(previous, id.clone()));
        }
        self.by_time.insert((at, id));
    }

    /// Forgets an execution (its actor is live again, or it ended).
    pub fn remove(&mut self, id: &ExecutionId) {
        if let Some(at) = self.by_id.remove(id) {
            self.by_time.remove(&(at, id.clone()));
            crate::shrink::relax(&mut self.by_id);
        }
    }

    /// Forgets every execution `matches` selects; returns how many.
    pub fn remove_matching(&mut self, matches: impl Fn(&ExecutionId) -> bool) -> usize {
        let gone: Vec<ExecutionId> = self
            .by_id
            .keys()
            .filter(|id| matches(id))
            .cloned()
            .collect();
        for id in &gone {
            self.remove(id);
        }
        gone.len()
    }

    /// Returns the earliest wake-up time.
    pub fn next(&self) -> Option<Timestamp> {
        self.by_time.first().map(|(at, _)| *at)
    }

    /// Removes and returns every execution due at or before `now`, earliest first.
    pub fn take_due(&mut self, now: Timestamp) -> Vec<ExecutionId> {
        let mut due = Vec::new();
        while let Some((at, _)) = self.by_time.first() {
            if *at > now {
                break;
            }
            if let Some((_, id)) = self.by_time.pop_first() {
                self.by_id.remove(&id);
                due.push(id);
            }
        }
        crate::shrink::relax(&mut self.by_id);
        due
    }

    /// Number of executions waiting.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(seconds: i64) -> Timestamp {
        chrono::Utc
            .timestamp_opt(1_700_000_000 + seconds, 0)
            .unwrap()
    }

    #[test]
    fn due_entries_come_out_in_time_order_and_only_once() {
        let mut index = WakeIndex::default();
        index.insert(ExecutionId::from("b"), at(20));
        index.insert(ExecutionId::from("a"), at(10));
        index.insert(ExecutionId::from("c"), at(30));
        assert_eq!(index.next(), Some(at(10)));
        assert_eq!(
            index.take_due(at(20)),
            vec![ExecutionId::from("a"), ExecutionId::from("b")]
        );
        assert!(index.take_due(at(20)).is_empty());
        assert_eq!(index.len(), 1);
        assert_eq!(index.next(), Some(at(30)));
    }

    #[test]
    fn a_second_insert_moves_the_entry_and_remove_forgets_it() {
        let mut index = WakeIndex::default();
        index.insert(ExecutionId::from("a"), at(10));
        index.insert(ExecutionId::from("a"), at(50));
        assert_eq!(index.len(), 1);
        assert!(index.take_due(at(40)).is_empty());
        index.remove(&ExecutionId::from("a"));
        assert_eq!(index.len(), 0);
        assert_eq!(index.next(), None);
    }
}
