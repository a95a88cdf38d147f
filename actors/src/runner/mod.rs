//! Runners: the `Dispatcher` (queued jobs ↔ idle runner connections by capability, and the
//! supervisor of runner actors), one `RunnerActor` per runner connection, and the in-memory
//! tool directory of published schemas.

pub mod dispatcher;
pub mod holders;
pub mod runner_actor;
pub mod tools;

pub use dispatcher::{Dispatcher, DispatcherMsg};
pub use holders::JobReport;
pub use runner_actor::{RunnerActor, RunnerArgs, RunnerMsg};
pub use tools::ToolDirectory;
