//! Agent groups: one `AgentGroupActor` per agent id holds that agent's consumer connections,
//! assigns pending executions round-robin, routes pushes to the consumer holding a session
//! (keeping an outbox while it is away), and gives a disconnected consumer a grace period to
//! come back before its executions are reset. The logic is the pure core `Group` (core.rs);
//! the actor is its shell. `AgentSupervisor` spawns and restarts groups.

pub mod actor;
pub mod core;
mod core_types;
pub mod messages;
pub mod supervisor;

#[cfg(test)]
mod core_tests;
#[cfg(test)]
mod group_tests;
#[cfg(test)]
mod label_limits_tests;
#[cfg(test)]
mod limits_tests;
#[cfg(test)]
mod retry_tests;
#[cfg(test)]
mod slots_tests;
#[cfg(test)]
mod slow_tests;
#[cfg(test)]
mod tests;

pub use actor::{AgentGroupActor, AgentGroupArgs};
pub use core::{Group, GroupEffect, GroupSnapshot, LostReason, OfferOutcome, Outlet, Refused};
pub use messages::{AgentGroupMsg, AgentSupervisorMsg};
pub use supervisor::AgentSupervisor;
