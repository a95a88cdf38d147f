//! Executions: the pure state machine (`state`, `machine`), the `ExecutionActor` that is the
//! single writer of one execution, and the `ExecutionSupervisor` that spawns, rehydrates and
//! restarts them.

pub mod actor;
mod breakers;
pub mod commands;
mod dormant;
mod effects;
mod handling;
mod hooks;
pub mod journal;
mod llm_admission;
pub mod machine;
pub mod messages;
mod passivation;
mod policy_check;
mod projection;
mod rebuild;
pub mod records;
pub mod rejection;
mod spans;
pub mod state;
mod submit;
pub mod supervisor;
mod timers;
pub mod watchdog;

#[cfg(test)]
mod at_most_once_tests;
#[cfg(test)]
mod creation_tests;
#[cfg(test)]
mod in_doubt_tests;
#[cfg(test)]
mod passivation_tests;
#[cfg(test)]
mod probe_tests;
#[cfg(test)]
mod restart_tests;
#[cfg(test)]
mod retry_tests;
#[cfg(test)]
mod session_index_tests;
#[cfg(test)]
mod stall_tests;
#[cfg(test)]
mod supervisor_tests;
#[cfg(test)]
pub(crate) mod test_support;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod timer_tests;

pub use actor::{ExecutionActor, ExecutionArgs, StartMode};
pub use commands::{
    Capabilities, Effect, ExecutionSettings, Intent, IntentReply, JobSpec, StepOutcome,
    StepResultReply,
};
pub use machine::RUNNER_LOST_ERROR;
pub use messages::{ApprovalFacts, ExecutionMsg, LlmAdmission};
pub use messages::{ExecutionSupervisorMsg, ReleaseFilter};
pub use rejection::Rejection;
pub use state::ExecutionState;
pub use supervisor::ExecutionSupervisor;
