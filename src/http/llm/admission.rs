//! Admission of a model call: the execution's answer (`Kernel::admit_llm_call`) turned into a
//! refusal in the route's format, and — for a budget under `on_exceed: require_approval` — the
//! bounded wait for an operator's raise.

use std::time::Duration;

use axum::http::StatusCode;
use axum::response::Response;
use keel_actors::execution::LlmAdmission;
use keel_actors::ids::ExecutionId;
use keel_actors::kernel::Kernel;
use tokio::time::Instant;
use tracing::warn;

use super::refusal::{finished, refusal, unavailable};
use crate::gateway::Format;

/// How often a call waiting for a budget raise asks its execution again.
const RAISE_POLL: Duration = Duration::from_millis(100);

/// Returns the execution's runs so far when the call may go on, or the refusal to answer.
pub(super) async fn admit(
    kernel: &Kernel,
    execution_id: &ExecutionId,
    model_id: &str,
    format: Format,
) -> Result<u32, Response> {
    let refused = |reason: &str| kernel.metrics().llm.refused(reason);
    let over_budget = |message: String| {
        refused("budget");
        refusal(
            format,
            StatusCode::FORBIDDEN,
            "permission_error",
            "budget_exceeded",
            &format!("execution {execution_id}: {message}"),
        )
    };
    let mut deadline = None;
    // A caller that goes away while waiting ends the wait, so that the execution does not stay
    // blocked for a call nobody waits for.
    let mut guard = WaitGuard {
        kernel,
        execution_id,
        waiting: false,
    };
    loop {
        let admission = kernel
            .admit_llm_call(execution_id, model_id, deadline.is_none())
            .await;
        guard.waiting = matches!(admission, Ok(LlmAdmission::AwaitingApproval { .. }));
        match admission {
            Ok(LlmAdmission::Allowed { runs }) => return Ok(runs),
            Ok(LlmAdmission::ModelNotAllowed(reason)) => {
                refused("model");
                return Err(refusal(
                    format,
                    StatusCode::FORBIDDEN,
                    "permission_error",
                    "model_not_allowed",
                    &reason,
                ));
            }
            Ok(LlmAdmission::Finished) => {
                refused("finished");
                return Err(finished(format, execution_id.as_str()));
            }
            Ok(LlmAdmission::OverBudget(reason)) if deadline.is_some() => {
                return Err(over_budget(format!(
                    "{reason}; the wait for a raise ended without one (denied, or timed out for \
                     another call)"
                )));
            }
            Ok(LlmAdmission::OverBudget(reason)) => return Err(over_budget(reason)),
            Ok(LlmAdmission::AwaitingApproval { reason, wait }) => {
                let until = *deadline.get_or_insert_with(|| Instant::now() + wait);
                if Instant::now() >= until {
                    guard.waiting = false;
                    if let Err(error) = kernel.end_budget_wait(execution_id).await {
                        warn!(execution_id = %execution_id, error = %error,
                              "LLM gateway: ending a budget wait failed");
                    }
                    return Err(over_budget(format!(
                        "{reason}; no budget.approve raised it within {} s",
                        wait.as_secs_f64()
                    )));
                }
                tokio::time::sleep(RAISE_POLL.min(until - Instant::now())).await;
            }
            Err(error) => return Err(unavailable(format, &error)),
        }
    }
}

/// Ends the execution's budget wait when dropped while `waiting` (the caller went away).
struct WaitGuard<'a> {
    kernel: &'a Kernel,
    execution_id: &'a ExecutionId,
    waiting: bool,
}

impl Drop for WaitGuard<'_> {
    fn drop(&mut self) {
        if !self.waiting {
            return;
        }
        let (kernel, execution_id) = (self.kernel.clone(), self.execution_id.clone());
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(error) = kernel.end_budget_wait(&execution_id).await {
                    warn!(execution_id = %execution_id, error = %error,
                          "LLM gateway: ending an abandoned budget wait failed");
                }
            });
        }
    }
}
