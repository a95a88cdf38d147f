//! Admission of a model call: the execution's answer (`Kernel::admit_llm_call`) turned into a
//! refusal in the route's format, and — for a budget under `on_exceed: require_approval` — the
//! bounded wait for an operator's raise — and, near the budget's edge, the bounded wait for the
//! execution's calls in flight to settle.

use std::time::Duration;

use axum::http::StatusCode;
use axum::response::Response;
use keel_actors::execution::LlmAdmission;
use keel_actors::guardrails::reservations::LlmEstimate;
use keel_actors::ids::ExecutionId;
use keel_actors::kernel::Kernel;
use tokio::time::Instant;
use tracing::warn;

use super::refusal::{finished, refusal, unavailable};
use crate::gateway::{Format, Provider};

/// How often a call waiting for a budget raise asks its execution again.
const RAISE_POLL: Duration = Duration::from_millis(100);
/// How often a call waiting for the execution's calls in flight asks again.
const IN_FLIGHT_POLL: Duration = Duration::from_millis(10);

/// A call that may go: the execution's runs so far and the call's reservation.
pub(super) struct Admitted {
    pub(super) runs: u32,
    pub(super) reservation: Option<u64>,
    /// The execution's trace context (when traces are exported).
    pub(super) traceparent: Option<String>,
}

/// Returns the execution's runs and the call's reservation when the call may go on, or the
/// refusal to answer. A call that must wait for calls in flight waits up to the provider's
/// `max_wait`.
pub(super) async fn admit(
    kernel: &Kernel,
    execution_id: &ExecutionId,
    provider: &Provider,
    model: &str,
    format: Format,
    estimate: &LlmEstimate,
) -> Result<Admitted, Response> {
    let model_id = format!("{}/{model}", provider.name);
    let max_wait = provider.gate.max_wait();
    let refused = |reason: &str| {
        kernel
            .metrics()
            .llm
            .refused(&provider.name, Some(model), reason)
    };
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
    let mut in_flight_deadline = None;
    // A caller that goes away while waiting ends the wait, so that the execution does not stay
    // blocked for a call nobody waits for.
    let mut guard = WaitGuard {
        kernel,
        execution_id,
        waiting: false,
    };
    loop {
        let admission = kernel
            .admit_llm_call(execution_id, &model_id, deadline.is_none(), estimate)
            .await;
        guard.waiting = matches!(admission, Ok(LlmAdmission::AwaitingApproval { .. }));
        match admission {
            Ok(LlmAdmission::Allowed {
                runs,
                reservation,
                traceparent,
            }) => {
                return Ok(Admitted {
                    runs,
                    reservation,
                    traceparent,
                });
            }
            Ok(LlmAdmission::InFlight { calls }) => {
                let until = *in_flight_deadline.get_or_insert_with(|| Instant::now() + max_wait);
                if Instant::now() >= until {
                    refused("budget_in_flight");
                    let mut response = refusal(
                        format,
                        StatusCode::TOO_MANY_REQUESTS,
                        "rate_limit_error",
                        "budget_in_flight",
                        &format!(
                            "execution {execution_id}: its {calls} model calls in flight may                              spend what is left of its budget, and none ended within {} s",
                            max_wait.as_secs_f64()
                        ),
                    );
                    response.headers_mut().insert(
                        axum::http::header::RETRY_AFTER,
                        axum::http::HeaderValue::from_static("1"),
                    );
                    return Err(response);
                }
                tokio::time::sleep(IN_FLIGHT_POLL.min(until - Instant::now())).await;
            }
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
