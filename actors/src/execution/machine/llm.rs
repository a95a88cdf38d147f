//! Model calls made through the LLM gateway: recorded as `llm.called`; a call that finds the
//! budget spent under `on_exceed: require_approval` blocks the execution on a budget raise
//! (`execution.blocked` `budget`), which a `budget.approve` signal answers.

use serde_json::Value;

use super::super::rejection::Rejection;
use super::super::state::ExecutionState;
use super::Transition;
use crate::events::{BlockReason, EventBody, LlmCall, NewEvent, ResumeReason};
use crate::guardrails::budget::parse_cost;

/// Signal type that answers a budget wait.
pub const BUDGET_APPROVE: &str = "budget.approve";

/// Records a finished model call. Refused once the execution has ended: its terminal event
/// stays the last one (the gateway logs the call instead).
pub fn llm_called(state: &ExecutionState, call: Box<LlmCall>) -> Result<Transition, Rejection> {
    live(state)?;
    let mut transition = Transition::default();
    transition.event(NewEvent::execution(EventBody::LlmCalled(call)));
    Ok(transition)
}

/// Blocks the execution until an operator raises `key` (`max_cost.usd`, `max_tokens`). Records
/// nothing when it already waits for a raise.
pub fn budget_wait(state: &ExecutionState, key: &str) -> Result<Transition, Rejection> {
    live(state)?;
    let mut transition = Transition::default();
    if state.budget_wait.is_none() {
        transition.event(NewEvent::execution(EventBody::ExecutionBlocked {
            reason: BlockReason::Budget,
            reference: key.to_owned(),
            tool_id: None,
            arguments: None,
            remote: None,
        }));
    }
    Ok(transition)
}

/// Ends a budget wait no operator answered in time. Records nothing when none is waiting.
pub fn budget_wait_timed_out(state: &ExecutionState) -> Result<Transition, Rejection> {
    live(state)?;
    let mut transition = Transition::default();
    if state.budget_wait.is_some() {
        transition.event(NewEvent::execution(EventBody::ExecutionResumed {
            reason: ResumeReason::BudgetApprovalTimedOut,
        }));
    }
    Ok(transition)
}

/// The events that answer a budget wait with a `budget.approve` payload
/// (`{"approved": bool, "max_cost": {unit: limit}, "max_tokens": n, "reason"}`): the raise and
/// the resume, or the denial. A granted raise must name a new limit. `None` when no budget wait
/// is pending (the signal is then recorded like any other).
pub(super) fn budget_answer(
    state: &ExecutionState,
    payload: &Value,
) -> Result<Option<Vec<NewEvent>>, Rejection> {
    if state.budget_wait.is_none() {
        return Ok(None);
    }
    let invalid = |message: &str| Rejection::Validation(format!("{BUDGET_APPROVE}: {message}"));
    let Value::Object(object) = payload else {
        return Err(invalid("the payload must be a JSON object"));
    };
    let approved = match object.get("approved") {
        Some(Value::Bool(approved)) => *approved,
        _ => return Err(invalid("approved must be true or false")),
    };
    if !approved {
        return Ok(Some(vec![NewEvent::execution(
            EventBody::ExecutionResumed {
                reason: ResumeReason::BudgetRaiseDenied,
            },
        )]));
    }
    let max_cost = parse_cost(object.get("max_cost").unwrap_or(&Value::Null))
        .map_err(|message| invalid(&format!("max_cost: {message}")))?
        .unwrap_or_default();
    let max_tokens = match object.get("max_tokens") {
        None | Some(Value::Null) => None,
        Some(value) => Some(
            value
                .as_u64()
                .ok_or_else(|| invalid("max_tokens must be a whole number of at least 0"))?,
        ),
    };
    if max_cost.is_empty() && max_tokens.is_none() {
        return Err(invalid(
            "a granted raise names the new limits: max_cost and/or max_tokens",
        ));
    }
    Ok(Some(vec![
        NewEvent::execution(EventBody::BudgetRaised {
            max_cost,
            max_tokens,
        }),
        NewEvent::execution(EventBody::ExecutionResumed {
            reason: ResumeReason::BudgetRaised,
        }),
    ]))
}

fn live(state: &ExecutionState) -> Result<(), Rejection> {
    if state.status.is_terminal() {
        return Err(Rejection::Terminal {
            execution: state.id.to_string(),
            status: state.status,
        });
    }
    Ok(())
}
