//! `AgentGroupActor`: the consumers of one agent id. It is the only place that knows which
//! connection a consumer has, so assignment, push routing, outbox and disconnect grace live here.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::mpsc::{self, error::TrySendError};

use super::messages::AgentGroupMsg;
use crate::execution::{ExecutionMsg, Rejection};
use crate::guardrails::queue::PendingQueue;
use crate::ids::{AgentId, ExecutionId};
use crate::kernel::KernelError;
use crate::kernel::context::Ctx;
use crate::push::Push;

/// Most pushes kept for one absent consumer.
const OUTBOX_LIMIT: usize = 10_000;
/// Most delivered results kept per consumer for a replay on reconnect.
const REPLAY_LIMIT: usize = 1_000;
/// Delivered results younger than this (or than the agent grace, if longer) are sent again
/// when their consumer reconnects: a push written to a connection that was already dead, or
/// still queued for a replaced one, is otherwise lost.
const REPLAY_WINDOW: std::time::Duration = std::time::Duration::from_secs(30);
/// Delay before pending executions are offered again after a failed assignment attempt (for
/// example a commit refused during a database outage).
const ASSIGNMENT_RETRY: std::time::Duration = std::time::Duration::from_millis(500);
/// Offers in flight at once: each is a commit in its execution, so they overlap in the store
/// writer's group commit instead of queueing behind each other here.
const OFFERS_IN_FLIGHT: usize = 256;

/// Arguments of an agent group.
pub struct AgentGroupArgs {
    /// Shared context.
    pub ctx: Arc<Ctx>,
    /// Agent id.
    pub agent_id: AgentId,
}

struct Consumer {
    connection: u64,
    sender: mpsc::Sender<Push>,
}

/// State of an agent group.
pub struct AgentGroupState {
    ctx: Arc<Ctx>,
    agent_id: AgentId,
    connected: BTreeMap<String, Consumer>,
    away: HashMap<String, u64>,
    lost: HashSet<String>,
    restored: HashSet<String>,
    bindings: HashMap<String, BTreeSet<ExecutionId>>,
    outbox: HashMap<String, VecDeque<Push>>,
    /// Results (`tool.result`, `approval.resolved`) recently written to each consumer.
    delivered: HashMap<String, VecDeque<(tokio::time::Instant, Push)>>,
    /// Pending executions, waiting or being offered (priority first, then arrival).
    pending: PendingQueue,
    /// Executions offered and not answered yet.
    offering: HashSet<ExecutionId>,
    /// Creators waiting for the first assignment attempt of their execution.
    waiting: HashMap<ExecutionId, ractor::RpcReplyPort<()>>,
    next_consumer: usize,
    generation: u64,
    /// A `RetryAssignment` is scheduled.
    retry_armed: bool,
}

/// The actor of one agent id.
pub struct AgentGroupActor;

impl Actor for AgentGroupActor {
    type Msg = AgentGroupMsg;
    type State = AgentGroupState;
    type Arguments = AgentGroupArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: AgentGroupArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(AgentGroupState {
            ctx: args.ctx,
            agent_id: args.agent_id,
            connected: BTreeMap::new(),
            away: HashMap::new(),
            lost: HashSet::new(),
            restored: HashSet::new(),
            bindings: HashMap::new(),
            outbox: HashMap::new(),
            delivered: HashMap::new(),
            pending: PendingQueue::default(),
            offering: HashSet::new(),
            waiting: HashMap::new(),
            next_consumer: 0,
            generation: 0,
            retry_armed: false,
        })
    }

    async fn post_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // A (re)started group learns its pending executions from the store, so nothing waits
        // forever because a queue was lost with a crashed predecessor (or passivated, or never
        // woken after a restart: a pending execution is only a row until a consumer takes it).
        // Oldest first, each with the priority of its `execution.created`.
        match state.ctx.store.pending_queue(state.agent_id.as_str()).await {
            Ok(found) => {
                for (id, priority) in found {
                    state.pending.push(id, priority);
                }
            }
            Err(error) => {
                tracing::warn!(agent.id = %state.agent_id, error = %error, "could not load pending executions");
            }
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            AgentGroupMsg::ConsumerConnected {
                consumer_id,
                connection,
                sender,
            } => {
                connect(state, consumer_id, connection, sender);
                assign_pending(&myself, state);
            }
            AgentGroupMsg::ConsumerDisconnected {
                consumer_id,
                connection,
            } => {
                let current = state
                    .connected
                    .get(&consumer_id)
                    .map(|consumer| consumer.connection);
                if current == Some(connection) {
                    state.connected.remove(&consumer_id);
                    start_grace(&myself, state, &consumer_id);
                }
            }
            AgentGroupMsg::GraceExpired {
                consumer_id,
                generation,
            } => {
                if state.away.get(&consumer_id) == Some(&generation) {
                    state.away.remove(&consumer_id);
                    consumer_gone(state, &consumer_id);
                }
            }
            AgentGroupMsg::ExecutionPending {
                execution_id,
                priority,
                reply,
            } => {
                state.pending.push(execution_id.clone(), priority);
                assign_pending(&myself, state);
                if let Some(reply) = reply {
                    // Answered when its offer is answered, or now if it is not being offered.
                    if state.offering.contains(&execution_id) {
                        state.waiting.insert(execution_id, reply);
                    } else {
                        let _ = reply.send(());
                    }
                }
            }
            AgentGroupMsg::OfferAnswered {
                execution_id,
                consumer_id,
                result,
            } => offer_answered(&myself, state, execution_id, consumer_id, result),
            AgentGroupMsg::SessionRestored {
                consumer_id,
                execution_id,
            } => {
                state
                    .bindings
                    .entry(consumer_id.clone())
                    .or_default()
                    .insert(execution_id);
                if !state.connected.contains_key(&consumer_id)
                    && !state.away.contains_key(&consumer_id)
                {
                    state.restored.insert(consumer_id.clone());
                    start_grace(&myself, state, &consumer_id);
                }
            }
            AgentGroupMsg::SessionEnded {
                consumer_id,
                execution_id,
            } => {
                if let Some(bound) = state.bindings.get_mut(&consumer_id) {
                    bound.remove(&execution_id);
                    if bound.is_empty() {
                        state.bindings.remove(&consumer_id);
                    }
                }
            }
            AgentGroupMsg::RetryAssignment => {
                state.retry_armed = false;
                assign_pending(&myself, state);
            }
            AgentGroupMsg::Push { consumer_id, push } => {
                deliver(&myself, state, &consumer_id, push)
            }
        }
        Ok(())
    }
}

fn connect(
    state: &mut AgentGroupState,
    consumer_id: String,
    connection: u64,
    sender: mpsc::Sender<Push>,
) {
    state.away.remove(&consumer_id);
    state.lost.remove(&consumer_id);
    crate::kernel::context::write(&state.ctx.lost_consumers)
        .remove(&(state.agent_id.to_string(), consumer_id.clone()));
    state.restored.remove(&consumer_id);
    tracing::info!(agent.id = %state.agent_id, consumer.id = %consumer_id, "agent consumer connected");
    // Replacing the entry drops the previous sender, which ends the previous stream.
    state
        .connected
        .insert(consumer_id.clone(), Consumer { connection, sender });
    // Results written to the previous connection may never have arrived: send the recent ones
    // of executions still bound here again (the SDK keeps the first value of a result).
    let replay = recent_results(state, &consumer_id);
    let queued = state.outbox.remove(&consumer_id).unwrap_or_default();
    if !replay.is_empty() {
        tracing::info!(agent.id = %state.agent_id, consumer.id = %consumer_id, count = replay.len(), "recent results sent again after a reconnect");
    }
    let replayed = replay.len();
    for (index, push) in replay.into_iter().chain(queued).enumerate() {
        let consumer = state.connected.get(&consumer_id);
        if consumer.is_none_or(|consumer| consumer.sender.try_send(push.clone()).is_err()) {
            break;
        }
        if index >= replayed {
            remember(state, &consumer_id, &push);
        }
    }
}

fn start_grace(myself: &ActorRef<AgentGroupMsg>, state: &mut AgentGroupState, consumer_id: &str) {
    state.generation += 1;
    let generation = state.generation;
    state.away.insert(consumer_id.to_owned(), generation);
    tracing::info!(agent.id = %state.agent_id, consumer.id = %consumer_id, "agent consumer disconnected, grace started");
    let consumer_id = consumer_id.to_owned();
    myself.send_after(state.ctx.config.agent_grace, move || {
        AgentGroupMsg::GraceExpired {
            consumer_id,
            generation,
        }
    });
}

/// Returns the results recently delivered to `consumer_id` for executions still bound to it,
/// oldest first, forgetting those past the replay window.
fn recent_results(state: &mut AgentGroupState, consumer_id: &str) -> Vec<Push> {
    let window = REPLAY_WINDOW.max(state.ctx.config.agent_grace);
    let Some(delivered) = state.delivered.get_mut(consumer_id) else {
        return Vec::new();
    };
    delivered.retain(|(at, _)| at.elapsed() <= window);
    let bound = state.bindings.get(consumer_id);
    delivered
        .iter()
        .filter(|(_, push)| {
            push.execution_id()
                .is_some_and(|id| bound.is_some_and(|bound| bound.contains(&ExecutionId::from(id))))
        })
        .map(|(_, push)| push.clone())
        .collect()
}

/// Remembers a result written to a consumer's connection, for [`recent_results`].
fn remember(state: &mut AgentGroupState, consumer_id: &str, push: &Push) {
    if !matches!(push.event, "tool.result" | "approval.resolved") {
        return;
    }
    let delivered = state.delivered.entry(consumer_id.to_owned()).or_default();
    if delivered.len() >= REPLAY_LIMIT {
        delivered.pop_front();
    }
    delivered.push_back((tokio::time::Instant::now(), push.clone()));
}

/// The consumer did not come back in time: its executions are told, its outbox dropped.
fn consumer_gone(state: &mut AgentGroupState, consumer_id: &str) {
    let reason = if state.restored.remove(consumer_id) {
        "recovery"
    } else {
        "agent_disconnect"
    };
    tracing::info!(agent.id = %state.agent_id, consumer.id = %consumer_id, reason, "agent consumer lost");
    state.lost.insert(consumer_id.to_owned());
    crate::kernel::context::write(&state.ctx.lost_consumers)
        .insert((state.agent_id.to_string(), consumer_id.to_owned()));
    state.outbox.remove(consumer_id);
    state.delivered.remove(consumer_id);
    let bound: Vec<ExecutionId> = state
        .bindings
        .get(consumer_id)
        .map(|bound| bound.iter().cloned().collect())
        .unwrap_or_default();
    for execution_id in bound {
        tell_lost(state, &execution_id, consumer_id, reason);
    }
}

/// Tells an execution that the consumer holding its session is gone, rebuilding it if it is
/// passivated; off the group's mailbox, since that may wait for the store.
fn tell_lost(state: &AgentGroupState, execution_id: &ExecutionId, consumer_id: &str, reason: &str) {
    let ctx = state.ctx.clone();
    let (execution_id, consumer_id, reason) = (
        execution_id.clone(),
        consumer_id.to_owned(),
        reason.to_owned(),
    );
    tokio::spawn(async move {
        let message = |ack| ExecutionMsg::ConsumerLost {
            consumer_id: consumer_id.clone(),
            reason: reason.clone(),
            ack: Some(ack),
        };
        if let Err(error) = ctx.ask_execution(&execution_id, message).await {
            tracing::warn!(execution.id = %execution_id, error = %error, "lost consumer could not be reported to its execution");
        }
    });
}

fn deliver(
    myself: &ActorRef<AgentGroupMsg>,
    state: &mut AgentGroupState,
    consumer_id: &str,
    push: Push,
) {
    if let Some(consumer) = state.connected.get(consumer_id) {
        match consumer.sender.try_send(push.clone()) {
            Ok(()) => {
                remember(state, consumer_id, &push);
                return;
            }
            Err(error) => {
                // Too slow or already gone: disconnect it; its sessions get the grace period.
                let push = match error {
                    TrySendError::Full(push) => {
                        state
                            .ctx
                            .metrics
                            .slow_consumers
                            .get_or_create(&crate::metrics::KindLabel {
                                kind: "agent".to_owned(),
                            })
                            .inc();
                        push
                    }
                    TrySendError::Closed(push) => push,
                };
                tracing::warn!(agent.id = %state.agent_id, consumer.id = %consumer_id, "agent consumer cannot keep up, disconnecting");
                state.connected.remove(consumer_id);
                start_grace(myself, state, consumer_id);
                keep(state, consumer_id, push);
                return;
            }
        }
    }
    let bound = state.bindings.get(consumer_id).is_some_and(|bound| {
        push.execution_id()
            .is_some_and(|id| bound.contains(&ExecutionId::from(id)))
    });
    if state.lost.contains(consumer_id)
        && let Some(execution_id) = push.execution_id().map(ExecutionId::from)
    {
        tell_lost(state, &execution_id, consumer_id, "agent_disconnect");
    }
    if bound || state.away.contains_key(consumer_id) {
        keep(state, consumer_id, push);
    }
}

fn keep(state: &mut AgentGroupState, consumer_id: &str, push: Push) {
    let queue = state.outbox.entry(consumer_id.to_owned()).or_default();
    if queue.len() >= OUTBOX_LIMIT {
        queue.pop_front();
        tracing::warn!(consumer.id = %consumer_id, "outbox full, oldest push dropped");
    }
    queue.push_back(push);
}

/// Offers pending executions to connected consumers, round-robin, a bounded number at a time.
/// Each offer runs in its own task (the execution commits its assignment, rebuilt from the
/// store first if it was passivated) and comes back as `OfferAnswered`, so the group keeps
/// serving its mailbox while executions commit.
fn assign_pending(myself: &ActorRef<AgentGroupMsg>, state: &mut AgentGroupState) {
    while state.offering.len() < OFFERS_IN_FLIGHT && !state.connected.is_empty() {
        let Some(execution_id) = state.pending.pop() else {
            return;
        };
        let consumer_id = state
            .connected
            .keys()
            .nth(state.next_consumer % state.connected.len())
            .cloned()
            .unwrap_or_default();
        state.next_consumer = state.next_consumer.wrapping_add(1);
        state.offering.insert(execution_id.clone());
        let ctx = state.ctx.clone();
        let group = myself.clone();
        tokio::spawn(async move {
            let offer = |reply| ExecutionMsg::OfferToConsumer {
                consumer_id: consumer_id.clone(),
                reply,
            };
            let result = match ctx.ask_execution(&execution_id, offer).await {
                Ok(answer) => answer,
                Err(error) => Err(error),
            };
            let _ = group.send_message(AgentGroupMsg::OfferAnswered {
                execution_id,
                consumer_id,
                result,
            });
        });
    }
}

/// Binds an assigned execution to its consumer and sends the assignment; a failed offer puts
/// the execution back and schedules a retry (nothing else may come along to trigger one once
/// the database is back).
fn offer_answered(
    myself: &ActorRef<AgentGroupMsg>,
    state: &mut AgentGroupState,
    execution_id: ExecutionId,
    consumer_id: String,
    result: Result<Push, KernelError>,
) {
    state.offering.remove(&execution_id);
    if let Some(reply) = state.waiting.remove(&execution_id) {
        let _ = reply.send(());
    }
    match result {
        Ok(push) => {
            state.pending.forget(&execution_id);
            state
                .bindings
                .entry(consumer_id.clone())
                .or_default()
                .insert(execution_id);
            match state.connected.get(&consumer_id) {
                Some(consumer) if consumer.sender.try_send(push.clone()).is_ok() => {
                    remember(state, &consumer_id, &push);
                }
                _ => keep(state, &consumer_id, push),
            }
        }
        Err(KernelError::Rejected(Rejection::NotPending(_) | Rejection::ExecutionNotFound(_))) => {
            state.pending.forget(&execution_id);
        }
        Err(error) => {
            tracing::warn!(execution.id = %execution_id, error = %error, "assignment failed, will retry");
            state.pending.put_back(execution_id);
            if !state.retry_armed {
                state.retry_armed = true;
                myself.send_after(ASSIGNMENT_RETRY, || AgentGroupMsg::RetryAssignment);
            }
            return;
        }
    }
    assign_pending(myself, state);
}
