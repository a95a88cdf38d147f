//! Policy: the engine interface, the built-in engines, the compiled YAML rule language, and the
//! `PolicyActor` that answers every `invoke_tool` intent (decision plus rate limit).

pub mod actor;
#[cfg(test)]
mod actor_tests;
mod breakers;
pub mod check;
#[cfg(test)]
mod check_tests;
mod denial;
pub mod engine;
pub mod messages;
pub mod rules;
mod windows;
#[cfg(test)]
mod windows_tests;

pub use actor::{PolicyActor, PolicyArgs};
pub use messages::PolicyMsg;

/// A policy in force: the engine that decides and, beside it, the hooks of the same policy
/// files. The hooks are not part of the engine, so no wrapper has to forward the engine's
/// methods (one it forgot would silently fall back to the trait's default).
#[derive(Clone)]
pub struct InForce {
    /// The engine.
    pub engine: std::sync::Arc<dyn PolicyEngine>,
    /// The hooks, in order.
    pub hooks: std::sync::Arc<[crate::hooks::HookSpec]>,
}
pub use engine::{
    Decision, DenialKind, PermissiveEngine, PolicyDecision, PolicyEngine, PolicyInput, RateLimit,
    RateSlot, RetrySettings, SecureDefaultEngine,
};
