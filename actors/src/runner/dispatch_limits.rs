//! The dispatcher's guardrails (docs/guardrails.md): runner circuit breakers (a runner id whose
//! breaker is open gets no job; after the cool-down one job is its probe), and tool limits
//! (`concurrency.tools`): how many jobs of each tool id are in runners' hands. A job counts from the moment it is handed to a connection
//! until the connection is free again (its result, or the step ended), while its runner is away
//! within its grace (it may still be working on it), and while a recovered job is held after a
//! restart (some runner may still hold it). Queued jobs never count.

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;

use super::dispatch::{Dispatch, DispatchEffect};
use crate::execution::JobSpec;
use crate::guardrails::breaker::{BreakerSet, Breakers};
use crate::ids::{RunnerId, ToolId};
use crate::store::RunnerToolResult;
use crate::time::Timestamp;

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
    /// Replaces the runner breakers; their state starts over when the entries changed.
    pub(super) fn set_runner_breakers(&mut self, set: BreakerSet) {
        if set != self.runner_breakers {
            self.runner_state = Breakers::default();
            self.runner_breakers = set;
        }
    }

    /// Returns whether `set` differs from the runner breakers in force (a change starts their
    /// state over, so the shell rebuilds it from the store).
    pub fn runner_breakers_differ(&self, set: &BreakerSet) -> bool {
        set != &self.runner_breakers
    }

    /// Replays runner results read from the store (a restart, or a reload that changed the
    /// runner entries) through the breakers' state machine, oldest first, then drops those
    /// closed with nothing left in their window. Changes are not reported: they happened before.
    pub fn replay_runner_results(&mut self, results: &[RunnerToolResult], now: Timestamp) {
        for result in results {
            if let Some(config) = self.runner_breakers.runner_config(&result.runner_id) {
                self.runner_state.record(
                    result.runner_id.as_str(),
                    config,
                    result.success,
                    result.at,
                );
            }
        }
        let set = &self.runner_breakers;
        self.runner_state.sweep(now, |id| {
            set.runner_config(&RunnerId::from(id))
                .map(|config| config.window)
        });
    }

    /// Returns whether `runner_id`'s breaker keeps it from getting a job at `now`.
    pub(super) fn runner_blocked(&self, runner_id: &RunnerId, now: Timestamp) -> bool {
        self.runner_breakers
            .runner_config(runner_id)
            .is_some_and(|config| self.runner_state.blocks(runner_id.as_str(), config, now))
    }

    /// A job goes to `runner_id`: after a cool-down it is the runner's probe.
    pub(super) fn runner_probe(&mut self, runner_id: &RunnerId, now: Timestamp) {
        if let Some(config) = self.runner_breakers.runner_config(runner_id) {
            self.runner_state.admit(runner_id.as_str(), config, now);
        }
    }

    /// Counts a result `runner_id` reported.
    pub(super) fn runner_result(
        &mut self,
        runner_id: &RunnerId,
        success: bool,
        now: Timestamp,
        effects: &mut Vec<DispatchEffect>,
    ) {
        let Some(config) = self.runner_breakers.runner_config(runner_id) else {
            return;
        };
        if let Some(change) = self
            .runner_state
            .record(runner_id.as_str(), config, success, now)
        {
            effects.push(DispatchEffect::RunnerCircuit(change));
        }
    }

    /// Returns the runner breakers that are open, half-open or counting failures, as JSON.
    pub fn runner_breakers_view(&self, now: Timestamp) -> Vec<Value> {
        self.runner_state.runner_view(now, &self.runner_breakers)
    }

    /// Returns the number of runner ids whose breaker is open or half-open.
    pub fn runner_circuits_open(&self) -> usize {
        self.runner_state.open_count()
    }

    /// Returns the jobs in runners' hands per tool id (empty without limits: nothing to count).
    pub(super) fn in_flight_by_tool(&self) -> HashMap<ToolId, usize> {
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
    pub(super) fn at_limit(&self, in_flight: &HashMap<ToolId, usize>, tool_id: &ToolId) -> bool {
        self.limits
            .limit(tool_id)
            .is_some_and(|limit| in_flight.get(tool_id).copied().unwrap_or(0) >= limit as usize)
    }

    /// Returns the slots of every limited tool id that has jobs in hands or queued, by tool id.
    pub fn tool_slots(&self) -> BTreeMap<ToolId, ToolSlots> {
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

    /// Returns whether the policy has tool limits.
    pub fn has_tool_limits(&self) -> bool {
        !self.limits.is_empty()
    }

    /// Returns whether `tool_id` has a limit now.
    pub fn is_limited(&self, tool_id: &ToolId) -> bool {
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
