//! Whether a model call of the LLM gateway may go to its provider: the execution still runs,
//! the policy's `models.allow` lists the model, and the budget is not spent — or, under
//! `on_exceed: require_approval`, the execution now waits for an operator to raise it. A call
//! that may go holds a reservation of its estimated spend until it is recorded
//! ([`crate::guardrails::reservations`]).

use super::actor::ExecutionActorState;
use super::effects::decide_and_apply;
use super::machine;
use super::messages::LlmAdmission;
use crate::guardrails::budget::OnExceed;
use crate::guardrails::reservations::{Fit, LlmEstimate};

/// Answers [`super::messages::ExecutionMsg::AdmitLlmCall`]. With `ask_approval`, a call over a
/// `require_approval` budget blocks the execution on a raise (once; later calls join the wait);
/// without it (a waiting call checking again) nothing is recorded.
pub(super) async fn admit(
    state: &mut ExecutionActorState,
    model_id: &str,
    ask_approval: bool,
    estimate: LlmEstimate,
) -> LlmAdmission {
    if state.exec.status.is_terminal() {
        return LlmAdmission::Finished;
    }
    let engine = crate::kernel::context::read(&state.ctx.policy_in_force)
        .engine
        .clone();
    let agent_id = &state.exec.agent_id;
    if let Some(reason) = engine.model_refusal(agent_id, model_id) {
        return LlmAdmission::ModelNotAllowed(reason);
    }
    let Some(budget) = engine.agent_budget(agent_id) else {
        return allowed(state, None);
    };
    let Some(exceeded) = budget.check_cost(&state.exec.usage) else {
        return match state
            .llm_reserved
            .fit(&budget, &state.exec.usage, &estimate)
        {
            Fit::Go => {
                let reservation = state.llm_reserved.reserve(estimate);
                allowed(state, Some(reservation))
            }
            Fit::WaitForInFlight => LlmAdmission::InFlight {
                calls: state.llm_reserved.len(),
            },
        };
    };
    if budget.on_exceed != Some(OnExceed::RequireApproval) {
        return LlmAdmission::OverBudget(exceeded.reason);
    }
    let awaiting = LlmAdmission::AwaitingApproval {
        reason: exceeded.reason.clone(),
        wait: budget.approval_wait(),
    };
    if state.exec.budget_wait.is_some() {
        return awaiting;
    }
    if !ask_approval {
        // The wait this call joined ended without a raise (denied or timed out).
        return LlmAdmission::OverBudget(exceeded.reason);
    }
    match decide_and_apply(state, |exec| machine::budget_wait(exec, &exceeded.key)).await {
        Ok(()) => awaiting,
        Err(error) => LlmAdmission::OverBudget(format!(
            "{} (the request to raise it could not be recorded: {error})",
            exceeded.reason
        )),
    }
}

fn allowed(state: &ExecutionActorState, reservation: Option<u64>) -> LlmAdmission {
    LlmAdmission::Allowed {
        runs: state.exec.runs,
        reservation,
        traceparent: state
            .ctx
            .config
            .traces
            .as_ref()
            .and(state.exec.traceparent.clone()),
    }
}
