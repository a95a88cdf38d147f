//! The kernel-wide event feed's part of the storage port: the query a feed reader sends and the
//! rows it gets back. Every event has a kernel-wide `position` (assigned by the database when it
//! is inserted); the feed reads the log in position order, across executions.
//!
//! Positions become visible in order because the kernel has one writer with one transaction in
//! flight (the `StoreWriter` on PostgreSQL; on SQLite the writer thread, which runs its
//! transactions one after another), and both adapters write through one connection: a reader
//! that has seen position `P` never later sees a newly committed event below `P`. Positions may have gaps
//! (a rolled-back PostgreSQL transaction, retention deleting old executions); a reader skips
//! them.

use crate::events::Event;
use crate::ids::{AgentId, ExecutionId};

/// One page of the feed: events with `position > after_position`, oldest first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FeedQuery {
    /// Only events after this position (0 reads from the start).
    pub after_position: i64,
    /// Maximum number of events to return.
    pub limit: i64,
    /// Only events of executions of this agent.
    pub agent_id: Option<AgentId>,
    /// Only events of this execution.
    pub execution_id: Option<ExecutionId>,
    /// Every pair must be among the execution's labels.
    pub labels: Vec<(String, String)>,
    /// Most bytes of stored payload to read (`None`: bounded by `limit` only); the page still
    /// holds at least one event (see [`crate::store::Batch`]).
    pub max_bytes: Option<i64>,
}

/// One event of the feed with what the feed adds to the envelope.
#[derive(Clone, Debug, PartialEq)]
pub struct FeedEvent {
    /// Kernel-wide position of the event.
    pub position: i64,
    /// Agent of the event's execution.
    pub agent_id: AgentId,
    /// The event as stored.
    pub event: Event,
}
