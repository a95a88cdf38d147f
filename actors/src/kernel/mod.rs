//! The kernel: the root supervisor that starts the actor tree and restarts its singletons, the
//! startup recovery pass, and the `Kernel` handle the HTTP layer uses.

pub mod config;
mod connections;
pub mod context;
mod creation;
mod guardrails;
mod handle;
mod inner;
mod recovery;
mod retention;
#[cfg(test)]
mod retention_tests;
mod root;
mod settle;
#[cfg(test)]
mod shutdown_tests;
pub mod types;

pub use config::KernelConfig;
pub use handle::Kernel;
pub(crate) use inner::KernelInner;
pub use inner::start;
pub use types::{CommitNotice, KernelError, PushStream, ToolEntry, ToolSchema};
