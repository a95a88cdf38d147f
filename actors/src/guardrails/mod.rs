//! Guardrails: mechanisms that bound how much runs, whatever the agent does (issue 10,
//! docs/guardrails.md). This module holds their pure parts; the actors apply them.
//!
//! - [`CreateOptions`]: priority and idempotency key of a creation.
//! - [`queue::PendingQueue`]: an agent group's pending executions, highest priority first and
//!   in arrival order within a priority.
//! - [`concurrency`]: running slots per agent id and step limits per tool id.

pub mod breaker;
pub mod budget;
pub mod concurrency;
pub mod metrics;
pub mod queue;
pub mod reservations;
mod usage;

/// What a creation may carry besides agent, input and labels. The default is what a client
/// that uses neither gets.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CreateOptions {
    /// Queue priority within the agent's pending executions: higher is offered first.
    pub priority: i64,
    /// `Idempotency-Key` of the request: stored on `execution.created`, unique kernel-wide.
    pub idempotency_key: Option<String>,
    /// Principal whose request creates it (recorded on `execution.created`).
    pub created_by: Option<String>,
    /// End user the creation is made for (recorded on `execution.created`).
    pub on_behalf_of: Option<String>,
    /// The new execution's id; `None` generates one. (Cluster mode picks an id in a partition
    /// the kernel holds.)
    pub id: Option<crate::ids::ExecutionId>,
}
