//! Policy: the engine interface, the built-in engines, the compiled YAML rule language, and the
//! `PolicyActor` that answers every `invoke_tool` intent (decision plus rate limit).

pub mod actor;
mod breakers;
pub mod engine;
pub mod rules;
mod windows;
#[cfg(test)]
mod windows_tests;

pub use actor::{PolicyActor, PolicyArgs, PolicyMsg};
pub use engine::{
    Decision, PermissiveEngine, PolicyDecision, PolicyEngine, PolicyInput, RateLimit,
    RetrySettings, SecureDefaultEngine,
};
