//! Step results and the circuit breakers: after a commit, the execution reports the results it
//! recorded to the policy actor, and records the breaker changes they caused
//! (`tool.circuit_opened`, `tool.circuit_closed`) in its own log.

use super::actor::ExecutionActorState;
use super::machine::Transition;
use super::state::ExecutionState;
use crate::events::{Event, EventBody, NewEvent};
use crate::guardrails::breaker::{BreakerChange, BreakerSet};
use crate::ids::ToolId;
use crate::kernel::context::call;
use crate::policy::PolicyMsg;
use crate::store::ToolResult;

/// Returns the step results among `events` (already applied to `exec`) of tools that have a
/// circuit breaker in the policy in force: only those are reported to the policy actor, so a
/// policy without breakers costs no round trip per step result. A reload that adds or widens
/// breakers makes the policy actor rebuild their state from the store, which holds every result.
pub(super) fn tool_results(
    exec: &ExecutionState,
    events: &[Event],
    breakers: &BreakerSet,
) -> Vec<ToolResult> {
    if breakers.0.is_empty() {
        return Vec::new();
    }
    events
        .iter()
        .filter_map(|event| {
            let success = match &event.body {
                EventBody::StepCompleted { .. } => true,
                EventBody::StepFailed { .. } | EventBody::StepTimedOut {} => false,
                _ => return None,
            };
            let step = exec.step(event.step_id.as_ref()?)?;
            breakers.config(&step.tool_id)?;
            Some(ToolResult {
                tool_id: step.tool_id.clone(),
                success,
                at: event.timestamp,
            })
        })
        .collect()
}

/// Reports committed results to the policy actor; returns the events of the breaker changes
/// they caused, to record in this execution (none once it is terminal: nothing follows the
/// terminal event; the change is still logged and counted by the policy actor).
pub(super) async fn report(
    state: &ExecutionActorState,
    results: Vec<ToolResult>,
) -> Option<Transition> {
    let policy = state.ctx.policy()?;
    let changes = match call(
        &policy,
        |reply| PolicyMsg::ToolResults(results, reply),
        state.ctx.config.call_timeout,
        "policy actor",
    )
    .await
    {
        Ok(changes) => changes,
        Err(error) => {
            tracing::warn!(error = %error, "step results not counted by the circuit breakers");
            return None;
        }
    };
    if changes.is_empty() || state.exec.status.is_terminal() {
        return None;
    }
    let events = changes
        .into_iter()
        .map(|change| {
            NewEvent::execution(match change {
                BreakerChange::Opened {
                    tool_id,
                    failures,
                    until,
                    probe,
                } => EventBody::ToolCircuitOpened {
                    tool_id: ToolId::new(tool_id),
                    failures,
                    probe,
                    until,
                },
                BreakerChange::Closed { tool_id } => EventBody::ToolCircuitClosed {
                    tool_id: ToolId::new(tool_id),
                },
            })
        })
        .collect();
    Some(Transition {
        events,
        effects: Vec::new(),
    })
}
