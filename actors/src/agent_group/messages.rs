//! Messages of agent groups and their supervisor.

use ractor::{ActorRef, RpcReplyPort};
use tokio::sync::mpsc;

use super::core::GroupSnapshot;
use crate::guardrails::concurrency::Labels;
use crate::ids::{AgentId, ConsumerId, ExecutionId};
use crate::kernel::KernelError;
use crate::push::Push;

/// Messages of one `AgentGroupActor`.
pub enum AgentGroupMsg {
    /// A consumer connected (replacing an older connection with the same consumer id).
    ConsumerConnected {
        /// Consumer id.
        consumer_id: ConsumerId,
        /// Connection number, to ignore late disconnects of replaced connections.
        connection: u64,
        /// Where its pushes go.
        sender: mpsc::Sender<Push>,
    },
    /// A consumer's connection ended.
    ConsumerDisconnected {
        /// Consumer id.
        consumer_id: ConsumerId,
        /// Connection number.
        connection: u64,
    },
    /// The grace period of a disconnected consumer ended (sent by the group to itself).
    GraceExpired {
        /// Consumer id.
        consumer_id: ConsumerId,
        /// Disconnect generation the timer was armed for.
        generation: u64,
    },
    /// An execution waits for a consumer; `reply` is answered after the assignment attempt.
    ExecutionPending {
        /// Execution id.
        execution_id: ExecutionId,
        /// Its queue priority (higher first).
        priority: i64,
        /// Its labels (for the limits per label value).
        labels: Labels,
        /// Answered once the attempt is over.
        reply: Option<RpcReplyPort<()>>,
    },
    /// A rebuilt execution still holds a session of this consumer (after a kernel restart).
    SessionRestored {
        /// Consumer id.
        consumer_id: ConsumerId,
        /// Execution id.
        execution_id: ExecutionId,
        /// Its labels, if the sender knows them (`None`: the group's, from the store).
        labels: Labels,
    },
    /// An execution's session ended (terminal or reset).
    SessionEnded {
        /// Consumer that held it.
        consumer_id: ConsumerId,
        /// Execution id.
        execution_id: ExecutionId,
    },
    /// Offers the pending executions again after an assignment attempt failed (sent by the
    /// group to itself, so an outage does not leave them waiting for a new trigger).
    RetryAssignment,
    /// Reads the agent's pending executions from the store again and offers them (cluster
    /// mode: this kernel acquired partitions holding some).
    ReloadPending,
    /// The answer of an execution to an offer (sent to the group by the task that asked).
    OfferAnswered {
        /// Execution offered.
        execution_id: ExecutionId,
        /// Consumer it was offered to.
        consumer_id: ConsumerId,
        /// The assignment push, or why there is none.
        result: Result<Push, KernelError>,
    },
    /// Sends a push to a consumer (or keeps it in the outbox while the consumer is away).
    Push {
        /// Consumer id.
        consumer_id: ConsumerId,
        /// The push.
        push: Push,
    },
    /// A policy was loaded: the agent's `max_running` and label limits are read again.
    PolicyReplaced,
    /// Answers a snapshot of the group's state.
    Observe(RpcReplyPort<GroupSnapshot>),
}

/// Messages of the agent supervisor.
pub enum AgentSupervisorMsg {
    /// Returns the group of an agent, spawning it if needed.
    GetOrSpawn(AgentId, RpcReplyPort<Option<ActorRef<AgentGroupMsg>>>),
    /// Delivers a message to the group of an agent, spawning it if needed.
    Forward(AgentId, AgentGroupMsg),
}
