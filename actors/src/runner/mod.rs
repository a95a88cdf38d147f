//! Runners: the `Dispatcher` (an actor shell around the pure core `Dispatch`, which matches
//! queued jobs with idle runner connections by capability; it also supervises the runner
//! actors), one `RunnerActor` per runner connection, and the in-memory tool directory of
//! published schemas.

pub mod dispatch;
mod dispatch_io;
mod dispatch_limits;
pub mod dispatcher;
pub mod holders;
pub mod messages;
pub mod runner_actor;
pub mod tools;

#[cfg(test)]
mod dispatch_breakers_tests;
#[cfg(test)]
mod dispatch_limits_tests;
#[cfg(test)]
mod dispatch_tests;
#[cfg(test)]
mod dispatcher_tests;
#[cfg(test)]
mod runner_tests;

pub use dispatch::{Dispatch, DispatchEffect, DispatchInput, DispatcherSnapshot};
pub use dispatch_limits::ToolSlots;
pub use dispatcher::Dispatcher;
pub use holders::JobReport;
pub use messages::{DispatcherMsg, RunnerMsg};
pub use runner_actor::{RunnerActor, RunnerArgs};
pub use tools::ToolDirectory;
