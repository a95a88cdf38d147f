//! The dispatcher's pure core: queued remote jobs ↔ idle runner connections by capability,
//! round-robin per tool; recovered jobs held for the runner grace; jobs of a connection that
//! left kept for its grace (the runner may come back with them), then reported lost.
//!
//! No actor, no clock, no timer: every input comes with the time it is decided at, and every
//! consequence is a [`DispatchEffect`] the actor shell carries out (send to a runner actor,
//! arm a timer, tell an execution). The shell in `dispatcher.rs` only decodes messages into
//! [`DispatchInput`]s and applies the effects; `dispatch_tests.rs` walks every transition.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use crate::execution::JobSpec;
use crate::guardrails::breaker::{BreakerSet, Breakers};
use crate::guardrails::concurrency::ToolLimits;
use crate::ids::{JobId, StepId, ToolId};
use crate::time::Timestamp;

pub use super::dispatch_io::{ConnectionKey, DispatchEffect, DispatchInput};

/// One open connection.
#[derive(Clone, Debug, PartialEq)]
pub struct ConnectionSlot {
    /// Connection number.
    pub connection: u64,
    /// Tool ids it offers.
    pub capabilities: HashSet<ToolId>,
    /// The job it holds (set before the job is written to its stream).
    pub busy: Option<JobSpec>,
}

/// The dispatcher's state.
#[derive(Debug, Default)]
pub struct Dispatch {
    pub(super) connections: BTreeMap<ConnectionKey, ConnectionSlot>,
    pub(super) queue: VecDeque<JobSpec>,
    rotation: HashMap<ToolId, usize>,
    pub(super) orphans: HashMap<ConnectionKey, (JobSpec, u64)>,
    generation: u64,
    pub(super) held: HashMap<JobId, JobSpec>,
    /// Held jobs reported lost instead of queued when their hold ends (`at_most_once`).
    lost_on_release: HashSet<JobId>,
    /// `max_concurrent_steps` per tool id (dispatch_limits.rs).
    pub(super) limits: ToolLimits,
    /// Circuit breakers per runner id: their configuration and state (dispatch_limits.rs).
    pub(super) runner_breakers: BreakerSet,
    pub(super) runner_state: Breakers,
}

/// What a test (or an operator) can see of the dispatcher, job ids only.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DispatcherSnapshot {
    /// Open connections with the job each holds.
    pub connections: Vec<(ConnectionKey, Option<JobId>)>,
    /// Queued job ids, in order.
    pub queued: Vec<JobId>,
    /// Recovered job ids held for the runner grace, sorted.
    pub held: Vec<JobId>,
    /// Jobs of connections that left, in their grace, sorted.
    pub orphaned: Vec<(ConnectionKey, JobId)>,
}

impl Dispatch {
    /// Applies one input decided at `now` and returns what to do, in order.
    pub fn apply(&mut self, input: DispatchInput, now: Timestamp) -> Vec<DispatchEffect> {
        let mut effects = Vec::new();
        match input {
            DispatchInput::Connected {
                key,
                connection,
                capabilities,
            } => {
                // A runner that comes back keeps working on its job and posts the result
                // itself: the new connection holds the job the old one had.
                let kept = self.orphans.remove(&key).map(|(job, _)| job);
                let mut slot = ConnectionSlot {
                    connection,
                    capabilities: capabilities.into_iter().collect(),
                    busy: kept,
                };
                if let Some(old) = self.connections.remove(&key) {
                    slot.busy = slot.busy.or(old.busy);
                }
                self.connections.insert(key, slot);
            }
            DispatchInput::Disconnected { key, connection } => {
                let current = self.connections.get(&key).map(|slot| slot.connection);
                if current == Some(connection)
                    && let Some(slot) = self.connections.remove(&key)
                {
                    effects.push(DispatchEffect::StopRunner(key.clone()));
                    self.left_holding(key, slot.busy, &mut effects);
                }
            }
            // Its stream ended with the actor, as if the runner had left: a job it held is kept
            // (and counted against its tool's limit) for the runner grace, since the runner may
            // still be working on it and come back with it; then it is reported lost.
            DispatchInput::RunnerFailed(key) => {
                if let Some(slot) = self.connections.remove(&key) {
                    self.left_holding(key, slot.busy, &mut effects);
                }
            }
            DispatchInput::SetCapabilities { runner_id, tools } => {
                for ((runner, _), slot) in &mut self.connections {
                    if runner == &runner_id {
                        slot.capabilities = tools.iter().cloned().collect();
                    }
                }
            }
            // A rebuilt execution (crash restart, passivation) re-announces its jobs: one the
            // dispatcher already holds somewhere must not be delivered twice.
            DispatchInput::Enqueue(job)
            | DispatchInput::Recovered(job)
            | DispatchInput::RecoveredAtMostOnce(job)
                if self.knows(&job.job_id) => {}
            DispatchInput::Enqueue(job) => {
                // A retry job is due at `not_before`: pass again right then, not at the next tick.
                if let Some(delay) = job.not_before.and_then(|at| (at - now).to_std().ok()) {
                    effects.push(DispatchEffect::TickAfter(delay));
                }
                self.queue.push_back(job);
            }
            DispatchInput::Recovered(job) => {
                effects.push(DispatchEffect::ArmRelease {
                    job_id: job.job_id.clone(),
                });
                self.held.insert(job.job_id.clone(), job);
            }
            DispatchInput::RecoveredAtMostOnce(job) => {
                effects.push(DispatchEffect::ArmRelease {
                    job_id: job.job_id.clone(),
                });
                self.lost_on_release.insert(job.job_id.clone());
                self.held.insert(job.job_id.clone(), job);
            }
            DispatchInput::ReleaseRecovered { job_id } => {
                let lost = self.lost_on_release.remove(&job_id);
                if let Some(job) = self.held.remove(&job_id) {
                    if lost {
                        // It may have run: its execution records that its outcome is unknown.
                        tracing::info!(step.id = %job.step_id, job.id = %job_id, "recovered at-most-once job reported lost after the runner grace");
                        effects.push(DispatchEffect::RunnerLost(job));
                    } else {
                        tracing::info!(step.id = %job.step_id, job.id = %job_id, "recovered job re-queued after the runner grace");
                        self.queue.push_back(job);
                    }
                }
            }
            DispatchInput::ConnectionFree(key) => {
                if let Some(slot) = self.connections.get_mut(&key) {
                    slot.busy = None;
                }
            }
            DispatchInput::StepEnded {
                step_id,
                cancel_reason,
            } => self.step_ended(&step_id, cancel_reason, &mut effects),
            DispatchInput::GraceExpired { key, generation } => {
                let armed = self.orphans.get(&key).map(|(_, armed)| *armed);
                if armed == Some(generation)
                    && let Some((job, _)) = self.orphans.remove(&key)
                {
                    effects.push(DispatchEffect::RunnerLost(job));
                }
            }
            DispatchInput::Tick => {}
            DispatchInput::SetToolLimits(limits) => self.limits = limits,
            DispatchInput::SetRunnerBreakers(set) => self.set_runner_breakers(set),
            DispatchInput::RunnerResult { runner_id, success } => {
                self.runner_result(&runner_id, success, now, &mut effects);
            }
        }
        self.pass(now, &mut effects);
        effects
    }

    /// Returns the snapshot of the state.
    pub fn snapshot(&self) -> DispatcherSnapshot {
        let mut held: Vec<JobId> = self.held.keys().cloned().collect();
        held.sort();
        let mut orphaned: Vec<(ConnectionKey, JobId)> = self
            .orphans
            .iter()
            .map(|(key, (job, _))| (key.clone(), job.job_id.clone()))
            .collect();
        orphaned.sort();
        DispatcherSnapshot {
            connections: self
                .connections
                .iter()
                .map(|(key, slot)| {
                    (
                        key.clone(),
                        slot.busy.as_ref().map(|job| job.job_id.clone()),
                    )
                })
                .collect(),
            queued: self.queue.iter().map(|job| job.job_id.clone()).collect(),
            held,
            orphaned,
        }
    }

    /// A connection left (or its actor failed) holding `job`: it is kept for the runner grace.
    fn left_holding(
        &mut self,
        key: ConnectionKey,
        job: Option<JobSpec>,
        effects: &mut Vec<DispatchEffect>,
    ) {
        if let Some(job) = job {
            self.generation += 1;
            let generation = self.generation;
            tracing::info!(runner.id = %key.0, step.id = %job.step_id, "runner left holding a job, grace started");
            self.orphans.insert(key.clone(), (job, generation));
            effects.push(DispatchEffect::ArmRunnerGrace { key, generation });
        }
    }

    /// Returns whether a job is queued, held, in a runner's hands or orphaned.
    fn knows(&self, job_id: &JobId) -> bool {
        self.queue.iter().any(|job| job.job_id == job_id)
            || self.held.contains_key(job_id)
            || self
                .connections
                .values()
                .any(|slot| slot.busy.as_ref().is_some_and(|job| job.job_id == job_id))
            || self.orphans.values().any(|(job, _)| job.job_id == job_id)
    }

    fn step_ended(
        &mut self,
        step_id: &StepId,
        cancel_reason: Option<String>,
        effects: &mut Vec<DispatchEffect>,
    ) {
        self.queue.retain(|job| job.step_id != step_id);
        self.orphans.retain(|_, (job, _)| job.step_id != step_id);
        self.held.retain(|_, job| job.step_id != step_id);
        let held = &self.held;
        self.lost_on_release
            .retain(|job_id| held.contains_key(job_id));
        for (key, slot) in &mut self.connections {
            if slot.busy.as_ref().is_none_or(|job| job.step_id != step_id) {
                continue;
            }
            if let (Some(job), Some(reason)) = (slot.busy.take(), cancel_reason.clone()) {
                effects.push(DispatchEffect::Cancel {
                    key: key.clone(),
                    job,
                    reason,
                });
            }
        }
    }

    /// Hands every due queued job to an idle capable connection, round-robin per tool; a job
    /// whose tool id is at its `max_concurrent_steps` keeps its place in the queue.
    fn pass(&mut self, now: Timestamp, effects: &mut Vec<DispatchEffect>) {
        let mut in_flight = self.in_flight_by_tool();
        let mut index = 0;
        while index < self.queue.len() {
            let job = &self.queue[index];
            if job.not_before.is_some_and(|at| at > now) || self.at_limit(&in_flight, &job.tool_id)
            {
                index += 1;
                continue;
            }
            let candidates: Vec<&ConnectionKey> = self
                .connections
                .iter()
                .filter(|(key, slot)| {
                    slot.busy.is_none()
                        && slot.capabilities.contains(&job.tool_id)
                        && !self.runner_blocked(&key.0, now)
                })
                .map(|(key, _)| key)
                .collect();
            if candidates.is_empty() {
                index += 1;
                continue;
            }
            let turn = self.rotation.entry(job.tool_id.clone()).or_default();
            let key = candidates[*turn % candidates.len()].clone();
            *turn = turn.wrapping_add(1);
            let Some(job) = self.queue.remove(index) else {
                break;
            };
            self.runner_probe(&key.0, now);
            if let Some(slot) = self.connections.get_mut(&key) {
                if !self.limits.is_empty() {
                    *in_flight.entry(job.tool_id.clone()).or_default() += 1;
                }
                slot.busy = Some(job.clone());
                effects.push(DispatchEffect::Deliver { key, job });
            }
        }
    }
}
