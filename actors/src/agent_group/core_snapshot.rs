//! The snapshot of a group's state, for tests and `Observe`.

use super::{Group, GroupSnapshot, Outlet};
use crate::ids::{ConsumerId, ExecutionId};

impl<O: Outlet> Group<O> {
    /// Returns the snapshot of the state.
    pub fn snapshot(&self) -> GroupSnapshot {
        let sorted = |set: &mut Vec<ConsumerId>| set.sort();
        let mut away: Vec<ConsumerId> = self.away.keys().cloned().collect();
        sorted(&mut away);
        let mut lost: Vec<ConsumerId> = self.lost.iter().cloned().collect();
        sorted(&mut lost);
        let mut bindings: Vec<(ConsumerId, Vec<ExecutionId>)> = self
            .bindings
            .iter()
            .map(|(consumer, bound)| (consumer.clone(), bound.iter().cloned().collect()))
            .collect();
        bindings.sort();
        let mut outbox: Vec<(ConsumerId, usize)> = self
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
