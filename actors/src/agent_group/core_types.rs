//! The agent group core's vocabulary: where pushes are written ([`Outlet`]), how an offer ended,
//! why an execution lost its consumer, what the shell must do, and what a test can see.

use tokio::sync::mpsc::{self, error::TrySendError};

use crate::ids::{ConsumerId, ExecutionId};
use crate::push::Push;

/// Why a write to a consumer's connection was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The connection's buffer is full: the consumer cannot keep up.
    Full,
    /// The connection is gone.
    Closed,
}

/// Where a consumer's pushes are written.
pub trait Outlet {
    /// Writes `push` without waiting.
    fn offer(&self, push: Push) -> Result<(), Refused>;
}

impl Outlet for mpsc::Sender<Push> {
    fn offer(&self, push: Push) -> Result<(), Refused> {
        self.try_send(push).map_err(|error| match error {
            TrySendError::Full(_) => Refused::Full,
            TrySendError::Closed(_) => Refused::Closed,
        })
    }
}

/// Why an execution is told its consumer is gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LostReason {
    /// The consumer disconnected and did not come back within the grace.
    AgentDisconnect,
    /// The consumer held the session before a kernel restart and did not come back.
    Recovery,
}

impl LostReason {
    /// The reset reason as events and the wire name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AgentDisconnect => "agent_disconnect",
            Self::Recovery => "recovery",
        }
    }
}

/// How an offer ended.
#[derive(Clone, Debug, PartialEq)]
pub enum OfferOutcome {
    /// The execution committed the assignment; the push goes to the consumer.
    Assigned(Push),
    /// The execution is no longer pending (or no longer exists): forget it.
    Gone,
    /// The attempt failed (store outage, timeout): offer again later.
    Failed(String),
}

/// What the shell must do.
#[derive(Clone, Debug, PartialEq)]
pub enum GroupEffect {
    /// Send `GraceExpired { consumer_id, generation }` after the agent grace.
    ArmGrace {
        /// Consumer.
        consumer_id: ConsumerId,
        /// Generation.
        generation: u64,
    },
    /// Record kernel-wide that a consumer is lost (executions read it).
    ConsumerLost(ConsumerId),
    /// Record kernel-wide that a consumer is back.
    ConsumerBack(ConsumerId),
    /// Tell an execution that the consumer holding its session is gone.
    TellLost {
        /// Execution.
        execution_id: ExecutionId,
        /// Consumer.
        consumer_id: ConsumerId,
        /// Why.
        reason: LostReason,
    },
    /// Offer an execution to a consumer; the answer comes back as `OfferAnswered`.
    Offer {
        /// Execution.
        execution_id: ExecutionId,
        /// Consumer.
        consumer_id: ConsumerId,
    },
    /// Send `RetryAssignment` after the retry delay.
    ArmRetry,
    /// A consumer was disconnected for not keeping up (a metric).
    SlowConsumer,
}

/// What a test can see of a group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupSnapshot {
    /// Connected consumers with their connection numbers.
    pub connected: Vec<(ConsumerId, u64)>,
    /// Consumers in their disconnect grace, sorted.
    pub away: Vec<ConsumerId>,
    /// Consumers whose grace ran out, sorted.
    pub lost: Vec<ConsumerId>,
    /// Executions bound to each consumer.
    pub bindings: Vec<(ConsumerId, Vec<ExecutionId>)>,
    /// Pushes kept for each absent consumer.
    pub outbox: Vec<(ConsumerId, usize)>,
    /// Pending executions not being offered, in offer order.
    pub pending: Vec<ExecutionId>,
    /// Executions being offered, sorted.
    pub offering: Vec<ExecutionId>,
}
