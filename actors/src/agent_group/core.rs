//! The agent group's pure core: the consumers of one agent id, round-robin assignment of its
//! pending executions, the outbox of an absent consumer, the disconnect grace, the replay of
//! recent results on a reconnect, and the backlog of offers in flight.
//!
//! No actor, no timer, no store: each transition takes the time it happens at and returns the
//! [`GroupEffect`]s the shell carries out (arm a timer, offer an execution, tell one its
//! consumer is lost). Pushes are written through each consumer's [`Outlet`] (its stream's
//! sender in the kernel, a recorder in `core_tests.rs`), since whether a write succeeds decides
//! what happens next.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

#[path = "core_limits.rs"]
mod limits;
#[path = "core_snapshot.rs"]
mod snapshot;

pub use super::core_types::{
    GroupEffect, GroupSnapshot, LostReason, OfferOutcome, Outlet, Refused,
};

use crate::guardrails::concurrency::{Labels, RunningSlots};
use crate::guardrails::queue::PendingQueue;
use crate::ids::{AgentId, ConsumerId, ExecutionId};
use crate::push::Push;

/// Most pushes kept for one absent consumer.
pub const OUTBOX_LIMIT: usize = 10_000;
/// Most delivered results kept per consumer for a replay on reconnect.
const REPLAY_LIMIT: usize = 1_000;
/// Delivered results younger than this (or than the agent grace, if longer) are sent again
/// when their consumer reconnects: a push written to a connection that was already dead, or
/// still queued for a replaced one, is otherwise lost.
pub const REPLAY_WINDOW: Duration = Duration::from_secs(30);
/// Offers in flight at once: each is a commit in its execution, so they overlap in the store
/// writer's group commit instead of queueing behind each other here.
pub const OFFERS_IN_FLIGHT: usize = 256;

struct Consumer<O> {
    connection: u64,
    outlet: O,
}

/// The state of one agent id's group.
pub struct Group<O> {
    agent_id: AgentId,
    /// Replay window: the longer of [`REPLAY_WINDOW`] and the agent grace.
    replay_window: Duration,
    connected: BTreeMap<ConsumerId, Consumer<O>>,
    away: HashMap<ConsumerId, u64>,
    lost: HashSet<ConsumerId>,
    restored: HashSet<ConsumerId>,
    bindings: HashMap<ConsumerId, BTreeSet<ExecutionId>>,
    outbox: HashMap<ConsumerId, VecDeque<Push>>,
    /// Results (`tool.result`, `approval.resolved`) recently written to each consumer.
    delivered: HashMap<ConsumerId, VecDeque<(Instant, Push)>>,
    /// Pending executions, waiting or being offered (priority first, then arrival).
    pending: PendingQueue,
    /// Executions offered and not answered yet.
    offering: HashSet<ExecutionId>,
    /// Running executions against the agent's `max_running` and label limits (core_limits.rs).
    slots: RunningSlots,
    next_consumer: usize,
    generation: u64,
    /// A `RetryAssignment` is scheduled.
    retry_armed: bool,
}

impl<O: Outlet> Group<O> {
    /// An empty group of `agent_id` whose consumers get `agent_grace` to come back.
    pub fn new(agent_id: AgentId, agent_grace: Duration) -> Self {
        Self {
            agent_id,
            replay_window: REPLAY_WINDOW.max(agent_grace),
            connected: BTreeMap::new(),
            away: HashMap::new(),
            lost: HashSet::new(),
            restored: HashSet::new(),
            bindings: HashMap::new(),
            outbox: HashMap::new(),
            delivered: HashMap::new(),
            pending: PendingQueue::default(),
            offering: HashSet::new(),
            slots: RunningSlots::default(),
            next_consumer: 0,
            generation: 0,
            retry_armed: false,
        }
    }

    /// Returns whether an execution's offer is in flight.
    pub fn is_offering(&self, execution_id: &ExecutionId) -> bool {
        self.offering.contains(execution_id)
    }

    /// A consumer connected (replacing an older connection with the same consumer id): it
    /// gets the recent results of its executions again, then its outbox, then offers.
    pub fn connect(
        &mut self,
        consumer_id: ConsumerId,
        connection: u64,
        outlet: O,
        now: Instant,
    ) -> Vec<GroupEffect> {
        let mut effects = vec![GroupEffect::ConsumerBack(consumer_id.clone())];
        self.away.remove(&consumer_id);
        self.lost.remove(&consumer_id);
        self.restored.remove(&consumer_id);
        tracing::info!(agent.id = %self.agent_id, consumer.id = %consumer_id, "agent consumer connected");
        // Replacing the entry drops the previous outlet, which ends the previous stream.
        let consumer = Consumer { connection, outlet };
        self.connected.insert(consumer_id.clone(), consumer);
        // Results written to the previous connection may never have arrived: send the recent
        // ones of executions still bound here again (the SDK keeps the first value of a result).
        let replay = self.recent_results(&consumer_id, now);
        let queued = self.outbox.remove(&consumer_id).unwrap_or_default();
        if !replay.is_empty() {
            tracing::info!(agent.id = %self.agent_id, consumer.id = %consumer_id, count = replay.len(), "recent results sent again after a reconnect");
        }
        let replayed = replay.len();
        for (index, push) in replay.into_iter().chain(queued).enumerate() {
            let consumer = self.connected.get(&consumer_id);
            if consumer.is_none_or(|consumer| consumer.outlet.offer(push.clone()).is_err()) {
                break;
            }
            if index >= replayed {
                self.remember(&consumer_id, &push, now);
            }
        }
        self.assign_pending(&mut effects);
        effects
    }

    /// A consumer's connection ended (ignored unless it is the current one).
    pub fn disconnect(&mut self, consumer_id: &ConsumerId, connection: u64) -> Vec<GroupEffect> {
        let mut effects = Vec::new();
        let current = self.connected.get(consumer_id).map(|c| c.connection);
        if current == Some(connection) {
            self.connected.remove(consumer_id);
            self.start_grace(consumer_id, &mut effects);
        }
        effects
    }

    /// The grace armed for `generation` ended.
    pub fn grace_expired(&mut self, consumer_id: &ConsumerId, generation: u64) -> Vec<GroupEffect> {
        let mut effects = Vec::new();
        if self.away.get(consumer_id) == Some(&generation) {
            self.away.remove(consumer_id);
            self.consumer_gone(consumer_id, &mut effects);
        }
        effects
    }

    /// Adds pending executions found in the store (a group starting), each with its priority
    /// and labels; no offer yet.
    pub fn load_pending(&mut self, found: impl IntoIterator<Item = (ExecutionId, i64, Labels)>) {
        for (id, priority, labels) in found {
            self.pending.push(id, priority, labels);
        }
    }

    /// An execution waits for a consumer.
    pub fn execution_pending(
        &mut self,
        execution_id: ExecutionId,
        priority: i64,
        labels: Labels,
    ) -> Vec<GroupEffect> {
        let mut effects = Vec::new();
        self.pending.push(execution_id, priority, labels);
        self.assign_pending(&mut effects);
        effects
    }

    /// An offer was answered: an assignment binds the execution and goes to its consumer (or
    /// its outbox); a failure puts the execution back and arms one retry.
    pub fn offer_answered(
        &mut self,
        execution_id: ExecutionId,
        consumer_id: ConsumerId,
        outcome: OfferOutcome,
        now: Instant,
    ) -> Vec<GroupEffect> {
        let mut effects = Vec::new();
        self.offering.remove(&execution_id);
        crate::shrink::relax_set(&mut self.offering);
        match outcome {
            OfferOutcome::Assigned(push) => {
                self.pending.forget(&execution_id);
                self.slots.assigned(execution_id.clone());
                self.bind(&consumer_id, execution_id);
                let written = self
                    .connected
                    .get(&consumer_id)
                    .is_some_and(|consumer| consumer.outlet.offer(push.clone()).is_ok());
                if written {
                    self.remember(&consumer_id, &push, now);
                } else {
                    self.keep(&consumer_id, push);
                }
            }
            OfferOutcome::Gone => {
                self.slots.offer_dropped(&execution_id);
                self.pending.forget(&execution_id);
            }
            OfferOutcome::Failed(error) => {
                self.slots.offer_dropped(&execution_id);
                tracing::warn!(execution.id = %execution_id, error = %error, "assignment failed, will retry");
                self.pending.put_back(execution_id);
                if !self.retry_armed {
                    self.retry_armed = true;
                    effects.push(GroupEffect::ArmRetry);
                }
                return effects;
            }
        }
        self.assign_pending(&mut effects);
        effects
    }

    /// A rebuilt execution still holds a session of this consumer (after a kernel restart):
    /// a consumer not seen since gets the grace to come back. `labels` `None` takes those the
    /// group knows (from the store, or from its queue).
    pub fn session_restored(
        &mut self,
        consumer_id: ConsumerId,
        execution_id: ExecutionId,
        labels: Labels,
    ) -> Vec<GroupEffect> {
        let mut effects = Vec::new();
        let labels = labels.or_else(|| self.pending.labels(&execution_id));
        self.slots.hold(execution_id.clone(), labels);
        self.bind(&consumer_id, execution_id);
        if !self.connected.contains_key(&consumer_id) && !self.away.contains_key(&consumer_id) {
            self.restored.insert(consumer_id.clone());
            self.start_grace(&consumer_id, &mut effects);
        }
        effects
    }

    /// The retry delay after a failed offer ended.
    pub fn retry(&mut self) -> Vec<GroupEffect> {
        let mut effects = Vec::new();
        self.retry_armed = false;
        self.assign_pending(&mut effects);
        effects
    }

    /// Sends a push to a consumer: written to its connection, kept in its outbox while it is
    /// away, or dropped for a consumer that holds nothing. A consumer too slow to take it is
    /// disconnected (its sessions get the grace).
    pub fn push(&mut self, consumer_id: &ConsumerId, push: Push, now: Instant) -> Vec<GroupEffect> {
        let mut effects = Vec::new();
        if let Some(consumer) = self.connected.get(consumer_id) {
            match consumer.outlet.offer(push.clone()) {
                Ok(()) => self.remember(consumer_id, &push, now),
                Err(refused) => {
                    if refused == Refused::Full {
                        effects.push(GroupEffect::SlowConsumer);
                    }
                    tracing::warn!(agent.id = %self.agent_id, consumer.id = %consumer_id, "agent consumer cannot keep up, disconnecting");
                    self.connected.remove(consumer_id);
                    self.start_grace(consumer_id, &mut effects);
                    self.keep(consumer_id, push);
                }
            }
            return effects;
        }
        let execution_id = push.execution_id().map(ExecutionId::from);
        let bound = self
            .bindings
            .get(consumer_id)
            .is_some_and(|bound| execution_id.as_ref().is_some_and(|id| bound.contains(id)));
        if self.lost.contains(consumer_id)
            && let Some(execution_id) = execution_id
        {
            effects.push(GroupEffect::TellLost {
                execution_id,
                consumer_id: consumer_id.to_owned(),
                reason: LostReason::AgentDisconnect,
            });
        }
        if bound || self.away.contains_key(consumer_id) {
            self.keep(consumer_id, push);
        }
        effects
    }

    fn bind(&mut self, consumer_id: &ConsumerId, execution_id: ExecutionId) {
        self.bindings
            .entry(consumer_id.to_owned())
            .or_default()
            .insert(execution_id);
    }

    fn start_grace(&mut self, consumer_id: &ConsumerId, effects: &mut Vec<GroupEffect>) {
        self.generation += 1;
        let generation = self.generation;
        self.away.insert(consumer_id.to_owned(), generation);
        tracing::info!(agent.id = %self.agent_id, consumer.id = %consumer_id, "agent consumer disconnected, grace started");
        effects.push(GroupEffect::ArmGrace {
            consumer_id: consumer_id.to_owned(),
            generation,
        });
    }

    /// Returns the results recently delivered to `consumer_id` for executions still bound to
    /// it, oldest first, forgetting those past the replay window.
    fn recent_results(&mut self, consumer_id: &ConsumerId, now: Instant) -> Vec<Push> {
        let window = self.replay_window;
        let Some(delivered) = self.delivered.get_mut(consumer_id) else {
            return Vec::new();
        };
        delivered.retain(|(at, _)| now.saturating_duration_since(*at) <= window);
        let bound = self.bindings.get(consumer_id);
        delivered
            .iter()
            .filter(|(_, push)| {
                push.execution_id().is_some_and(|id| {
                    bound.is_some_and(|bound| bound.contains(&ExecutionId::from(id)))
                })
            })
            .map(|(_, push)| push.clone())
            .collect()
    }

    /// Remembers a result written to a consumer's connection, for [`Self::recent_results`].
    fn remember(&mut self, consumer_id: &ConsumerId, push: &Push, now: Instant) {
        if !matches!(push.event, "tool.result" | "approval.resolved") {
            return;
        }
        let delivered = self.delivered.entry(consumer_id.to_owned()).or_default();
        if delivered.len() >= REPLAY_LIMIT {
            delivered.pop_front();
        }
        delivered.push_back((now, push.clone()));
    }

    /// The consumer did not come back in time: its executions are told, its outbox dropped.
    fn consumer_gone(&mut self, consumer_id: &ConsumerId, effects: &mut Vec<GroupEffect>) {
        let reason = if self.restored.remove(consumer_id) {
            LostReason::Recovery
        } else {
            LostReason::AgentDisconnect
        };
        tracing::info!(agent.id = %self.agent_id, consumer.id = %consumer_id, reason = reason.as_str(), "agent consumer lost");
        self.lost.insert(consumer_id.to_owned());
        effects.push(GroupEffect::ConsumerLost(consumer_id.to_owned()));
        self.outbox.remove(consumer_id);
        self.delivered.remove(consumer_id);
        for execution_id in self.bindings.get(consumer_id).into_iter().flatten() {
            effects.push(GroupEffect::TellLost {
                execution_id: execution_id.clone(),
                consumer_id: consumer_id.to_owned(),
                reason,
            });
        }
    }

    fn keep(&mut self, consumer_id: &ConsumerId, push: Push) {
        let queue = self.outbox.entry(consumer_id.to_owned()).or_default();
        if queue.len() >= OUTBOX_LIMIT {
            queue.pop_front();
            tracing::warn!(consumer.id = %consumer_id, "outbox full, oldest push dropped");
        }
        queue.push_back(push);
    }
}
