//! The dispatcher's tool limits (`concurrency.tools`, docs/guardrails.md): how many jobs of each
//! tool id are in runners' hands. A job counts from the moment it is handed to a connection
//! until the connection is free again (its result, or the step ended), while its runner is away
//! within its grace (it may still be working on it), and while a recovered job is held after a
//! restart (some runner may still hold it). Queued jobs never count.

use std::collections::{BTreeMap, HashMap};

use super::dispatch::Dispatch;
use crate::execution::JobSpec;

/// The slots of one limited tool id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolSlots {
    /// `max_concurrent_steps` of the tool id.
    pub limit: u32,
    /// Jobs in runners' hands.
    pub in_flight: usize,
    /// Queued jobs of the tool id while it is at its limit.
    pub waiting: usize,
}

impl Dispatch {
    /// Returns the jobs in runners' hands per tool id (empty without limits: nothing to count).
    pub(super) fn in_flight_by_tool(&self) -> HashMap<String, usize> {
        let mut counts = HashMap::new();
        if self.limits.is_empty() {
            return counts;
        }
        for job in self.in_hands() {
            *counts.entry(job.tool_id.clone()).or_default() += 1;
        }
        counts
    }

    /// Returns whether `tool_id` is at its limit with `in_flight` jobs in runners' hands.
    pub(super) fn at_limit(&self, in_flight: &HashMap<String, usize>, tool_id: &str) -> bool {
        self.limits
            .limit(tool_id)
            .is_some_and(|limit| in_flight.get(tool_id).copied().unwrap_or(0) >= limit as usize)
    }

    /// Returns the slots of every limited tool id that has jobs in hands or queued, by tool id.
    pub fn tool_slots(&self) -> BTreeMap<String, ToolSlots> {
        let in_flight = self.in_flight_by_tool();
        let mut slots = BTreeMap::new();
        let tools = in_flight
            .keys()
            .chain(self.queue.iter().map(|job| &job.tool_id));
        for tool_id in tools {
            if let Some(limit) = self.limits.limit(tool_id) {
                slots.entry(tool_id.clone()).or_insert(ToolSlots {
                    limit,
                    in_flight: in_flight.get(tool_id).copied().unwrap_or(0),
                    waiting: 0,
                });
            }
        }
        for job in &self.queue {
            if let Some(entry) = slots.get_mut(&job.tool_id)
                && entry.in_flight >= entry.limit as usize
            {
                entry.waiting += 1;
            }
        }
        slots
    }

    /// Returns whether `tool_id` has a limit now.
    pub fn is_limited(&self, tool_id: &str) -> bool {
        self.limits.limit(tool_id).is_some()
    }

    fn in_hands(&self) -> impl Iterator<Item = &JobSpec> {
        self.connections
            .values()
            .filter_map(|slot| slot.busy.as_ref())
            .chain(self.orphans.values().map(|(job, _)| job))
            .chain(self.held.values())
    }
}
