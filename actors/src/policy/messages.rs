//! Messages of the policy actor.

use std::sync::Arc;

use ractor::RpcReplyPort;

use super::engine::{PolicyDecision, PolicyInput};
use crate::guardrails::breaker::BreakerChange;
use crate::guardrails::budget::Budget;
use crate::ids::AgentId;
use crate::store::ToolResult;

/// Messages of the policy actor.
pub enum PolicyMsg {
    /// Decides about one tool call (rate limits included).
    CheckIntent(PolicyInput, RpcReplyPort<PolicyDecision>),
    /// Finishes a check the caller began: `decision` is the engine's verdict on `input` (not a
    /// denial), evaluated since `started`; the actor applies the budget, the breaker and the
    /// rate limit as `CheckIntent` does after its own evaluation.
    Admit {
        /// The call.
        input: PolicyInput,
        /// The engine's verdict.
        decision: Box<PolicyDecision>,
        /// When the caller began evaluating (for `keel_policy_evaluation_seconds`).
        started: std::time::Instant,
        /// The final decision.
        reply: RpcReplyPort<PolicyDecision>,
    },
    /// Replaces the engine and its hooks (hot reload); rate-limit windows are kept.
    ReplacePolicy(super::InForce),
    /// Decides about one tool call without counting it toward rate limits (a re-check of
    /// arguments a hook modified).
    Evaluate(PolicyInput, RpcReplyPort<PolicyDecision>),
    /// Returns the hooks that apply at `point` to a call decided by `rule_id` (found by
    /// evaluating `input` when `None`), in order.
    Hooks {
        /// Hook point.
        point: crate::hooks::HookPoint,
        /// The call.
        input: PolicyInput,
        /// Rule that decided it, when known.
        rule_id: Option<String>,
        /// Where the hooks go.
        reply: RpcReplyPort<Vec<crate::hooks::HookSpec>>,
    },
    /// Returns the budget of an agent's executions in the engine in force.
    AgentBudget(AgentId, RpcReplyPort<Option<Arc<Budget>>>),
    /// Step results, for the circuit breakers; answers the breaker changes they caused.
    ToolResults(Vec<ToolResult>, RpcReplyPort<Vec<BreakerChange>>),
    /// Returns the circuit breakers that are open, half-open or counting failures.
    Breakers(RpcReplyPort<Vec<serde_json::Value>>),
    /// Gives back the rate-limit slot of a call that did not go ahead (a `pre_tool` hook
    /// aborted it, or its modified arguments were refused): only calls that became steps count.
    ReleaseRateSlot(super::RateSlot),
}
