//! The snapshot of a group's state, for tests and `Observe`.

use super::{Group, GroupSnapshot, Outlet};
use crate::ids::ExecutionId;

impl<O: Outlet> Group<O> {
    /// Returns the snapshot of the state.
    pub fn snapshot(&self) -> GroupSnapshot {
        let sorted = |set: &mut Vec<String>| set.sort();
        let mut away: Vec<String> = self.away.keys().cloned().collect();
        sorted(&mut away);
        let mut lost: Vec<String> = self.lost.iter().cloned().collect();
        sorted(&mut lost);
        let mut bindings: Vec<(String, Vec<ExecutionId>)> = self
            .bindings
            .iter()
            .map(|(consumer, bound)| (consumer.clone(), bound.iter().cloned().collect()))
            .collect();
        bindings.sort();
        let mut outbox: Vec<(String, usize)> = self
            .outbox
            .iter()
            .map(|(consumer, kept)| (consumer.clone(), kept.len()))
            .collect();
        outbox.sort();
        let mut offering: Vec<ExecutionId> = self.offering.iter().cloned().collect();
        offering.sort();
        GroupSnapshot {
            connected: self
                .connected
                .iter()
                .map(|(consumer, entry)| (consumer.clone(), entry.connection))
                .collect(),
            away,
            lost,
            bindings,
            outbox,
            pending: self.pending.waiting_ids(),
            offering,
        }
    }
}
