//! Model calls made through the LLM gateway: recorded as `llm.called`, nothing else changes.

use super::super::rejection::Rejection;
use super::super::state::ExecutionState;
use super::Transition;
use crate::events::{EventBody, LlmCall, NewEvent};

/// Records a finished model call. Refused once the execution has ended: its terminal event
/// stays the last one (the gateway logs the call instead).
pub fn llm_called(state: &ExecutionState, call: Box<LlmCall>) -> Result<Transition, Rejection> {
    if state.status.is_terminal() {
        return Err(Rejection::Terminal {
            execution: state.id.to_string(),
            status: state.status,
        });
    }
    let mut transition = Transition::default();
    transition.event(NewEvent::execution(EventBody::LlmCalled(call)));
    Ok(transition)
}
