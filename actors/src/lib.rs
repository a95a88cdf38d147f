//! `keel-actors`: Keel's actor tree, its message types and pure state machines, and the ports
//! (storage, policy) it needs. It depends on neither HTTP nor SQL; the `keel` crate supplies
//! adapters for both.
#![forbid(unsafe_code)]

pub mod agent_group;
pub mod approvals;
pub mod error;
pub mod events;
pub mod execution;
pub mod feed;
pub mod guardrails;
pub mod hooks;
pub mod ids;
pub mod kernel;
pub mod metrics;
pub mod policy;
pub mod principal;
pub mod push;
pub mod runner;
pub mod shrink;
pub mod status;
pub mod store;
pub mod store_writer;
pub mod supervision;
pub mod time;
pub mod trace;

#[cfg(any(test, feature = "testing"))]
pub mod testing;

#[cfg(test)]
mod store_writer_tests;
