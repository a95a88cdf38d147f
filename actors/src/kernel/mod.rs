//! The kernel: the root supervisor that starts the actor tree and restarts its singletons, the
//! startup recovery pass, and the `Kernel` handle the HTTP layer uses (one `Arc` of the shared
//! [`Ctx`](context::Ctx), its methods split by concern over the files below).

mod calls;
pub mod config;
mod connections;
pub mod context;
mod creation;
mod guardrails;
mod handle;
mod lifecycle;
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
pub use lifecycle::start;
pub use types::{CommitNotice, KernelError, PushStream, ToolEntry, ToolSchema};
