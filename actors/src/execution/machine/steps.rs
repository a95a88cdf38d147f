//! Step results from agents and runners, retries with backoff, runner loss, `step.started`
//! and job claims.

use super::super::commands::{Effect, ExecutionSettings, JobSpec, StepOutcome};
use super::super::rejection::Rejection;
use super::super::state::{ExecutionState, StepState};
use super::*;
use crate::events::{EventBody, NewEvent};
use crate::ids::{JobId, RunnerId, StepId};
use crate::push::Push;
use crate::status::{ExecutionStatus, StepStatus};
use crate::time::Timestamp;
use serde_json::Value;
use std::time::Duration;

/// Records a step result reported by the agent that holds the session (local steps).
pub fn agent_step_result(
    state: &ExecutionState,
    outcome: &StepOutcome,
) -> Result<Transition, Rejection> {
    let step = state
        .step(&outcome.step_id)
        .ok_or_else(|| Rejection::StepNotFound(outcome.step_id.to_string()))?;
    if step.status.is_terminal() {
        if step.outcome == Some(outcome.success) {
            return Ok(Transition::default());
        }
        return Err(Rejection::StepResolved);
    }
    if step.awaiting_approval {
        return Err(Rejection::AwaitingApproval(step.id.to_string()));
    }
    Ok(final_result(state, step, outcome))
}

/// Records a result reported by a runner; a retryable failure with attempts left schedules a
/// retry instead of reporting to the agent. `jitter` in `[0, 1]` places the retry delay
/// within its jitter range (see [`jittered_retry_delay`]); the caller draws it.
pub fn runner_result(
    state: &ExecutionState,
    outcome: &StepOutcome,
    now: Timestamp,
    settings: &ExecutionSettings,
    jitter: f64,
) -> Result<Transition, Rejection> {
    let step = state
        .step(&outcome.step_id)
        .ok_or_else(|| Rejection::StepNotFound(outcome.step_id.to_string()))?;
    if step.status.is_terminal() {
        return Err(Rejection::StepResolved);
    }
    if step.awaiting_approval {
        return Err(Rejection::AwaitingApproval(step.id.to_string()));
    }
    if !outcome.success && outcome.retryable && step.attempt < step.max_attempts {
        if let Some(max) = step.max_retries
            && state.usage.retries >= max
        {
            // The retry budget is spent: the failure is final, and says why it was not retried.
            let mut outcome = outcome.clone();
            outcome.error = Some(format!(
                "{} (not retried: budget max_retries {max} reached)",
                tool_error_text(outcome.error.as_deref())
            ));
            return Ok(final_result(state, step, &outcome));
        }
        return Ok(retry(state, step, outcome, now, settings, jitter));
    }
    Ok(final_result(state, step, outcome))
}

fn final_result(state: &ExecutionState, step: &StepState, outcome: &StepOutcome) -> Transition {
    let mut transition = Transition::default();
    let error = if outcome.success {
        None
    } else {
        Some(tool_error_text(outcome.error.as_deref()))
    };
    let body = match &error {
        None => EventBody::StepCompleted {
            result: outcome.data.clone().unwrap_or(Value::Null),
            cost: outcome.cost.clone(),
        },
        Some(error) => EventBody::StepFailed {
            error: error.clone(),
            retryable: false,
            cost: outcome.cost.clone(),
        },
    };
    transition.event(NewEvent::step(&step.id, body));
    resume_if_last_tool(state, &[&step.id], &mut transition);
    let push = Push::tool_result(
        &state.id,
        &step.id,
        outcome.success,
        outcome.data.as_ref(),
        error.as_deref(),
    );
    transition.effect(Effect::PushToAgent(push));
    if step.remote {
        transition.effect(Effect::StepEnded {
            step_id: step.id.clone(),
            cancel_reason: None,
        });
    }
    transition
}

/// Returns the error of a failed step: never empty (WIRE.md corrections, item 9).
pub fn tool_error_text(error: Option<&str>) -> String {
    error
        .filter(|error| !error.is_empty())
        .unwrap_or("tool failed without a message")
        .to_owned()
}

/// Returns the delay before attempt `next_attempt`: base × 2^(n-2), capped (2 → base).
pub fn retry_delay(next_attempt: i64, base: Duration, cap: Duration) -> Duration {
    let exponent = u32::try_from(next_attempt.saturating_sub(2).clamp(0, 30)).unwrap_or(30);
    base.saturating_mul(2u32.saturating_pow(exponent)).min(cap)
}

/// Returns the delay before attempt `next_attempt` with equal jitter: the backoff `d` of
/// [`retry_delay`] scaled into `[d/2, d]` by `jitter` (0 → `d/2`, 1 → `d`), so it never
/// exceeds the cap.
pub fn jittered_retry_delay(
    next_attempt: i64,
    base: Duration,
    cap: Duration,
    jitter: f64,
) -> Duration {
    let ceiling = retry_delay(next_attempt, base, cap);
    let jitter = if jitter.is_finite() {
        jitter.clamp(0.0, 1.0)
    } else {
        1.0
    };
    ceiling.mul_f64(0.5 + 0.5 * jitter)
}

/// Returns the per-attempt deadline length of a step: its rule's, else the default.
pub(super) fn step_timeout(step: &StepState, settings: &ExecutionSettings) -> Duration {
    step.timeout.unwrap_or(settings.step_timeout)
}

fn retry(
    state: &ExecutionState,
    step: &StepState,
    outcome: &StepOutcome,
    now: Timestamp,
    settings: &ExecutionSettings,
    jitter: f64,
) -> Transition {
    let mut transition = Transition::default();
    let next_attempt = step.attempt + 1;
    let base = step.retry_base_delay.unwrap_or(settings.retry_base_delay);
    let cap = step.retry_max_delay.unwrap_or(settings.retry_max_delay);
    let not_before = add(now, jittered_retry_delay(next_attempt, base, cap, jitter));
    transition.event(NewEvent::step(
        &step.id,
        EventBody::StepFailed {
            error: tool_error_text(outcome.error.as_deref()),
            retryable: true,
            cost: outcome.cost.clone(),
        },
    ));
    transition.event(NewEvent::step(
        &step.id,
        EventBody::StepRetried {
            next_attempt,
            not_before: Some(not_before),
        },
    ));
    transition.effect(Effect::StepEnded {
        step_id: step.id.clone(),
        cancel_reason: None,
    });
    transition.effect(Effect::EnqueueJob(JobSpec {
        job_id: JobId::generate(),
        execution_id: state.id.clone(),
        step_id: step.id.clone(),
        attempt: next_attempt,
        tool_id: step.tool_id.clone(),
        arguments: step.arguments.clone(),
        deadline: add(not_before, step_timeout(step, settings)),
        not_before: Some(not_before),
        traceparent: None,
        idempotency_key: None,
    }));
    transition
}

/// The error of a step whose runner went away holding its job (after the runner grace): it
/// fails the attempt, but runner circuit breakers do not count it (docs/guardrails.md).
pub const RUNNER_LOST_ERROR: &str = "runner disconnected";

/// Handles a runner that went away holding `job_id` and did not come back: the job counts as a
/// retryable failure (re-queued while attempts remain, reported to the agent otherwise).
pub fn runner_lost(
    state: &ExecutionState,
    step_id: &StepId,
    job_id: &JobId,
    now: Timestamp,
    settings: &ExecutionSettings,
    jitter: f64,
) -> Option<Transition> {
    let step = state.step(step_id)?;
    if step.status.is_terminal() || step.job_id.as_ref() != Some(job_id) {
        return None;
    }
    if step.at_most_once {
        // It may have happened: never run it again without an operator's answer.
        let mut transition = Transition::default();
        transition.event(NewEvent::step(
            step_id,
            EventBody::StepOutcomeUnknown {
                runner_id: step.runner_id.clone(),
                reason: format!("{RUNNER_LOST_ERROR} after the job was delivered"),
            },
        ));
        transition.effect(Effect::StepEnded {
            step_id: step_id.clone(),
            cancel_reason: None,
        });
        return Some(transition);
    }
    let outcome = StepOutcome {
        step_id: step_id.clone(),
        success: false,
        data: None,
        error: Some(RUNNER_LOST_ERROR.to_owned()),
        retryable: true,
        cost: None,
    };
    runner_result(state, &outcome, now, settings, jitter).ok()
}

/// An operator's answer to a step whose outcome is unknown.
#[derive(Clone, Debug, PartialEq)]
pub enum Reconciliation {
    /// It happened; this is its result.
    Happened(Value),
    /// It did not happen: run it again (a new attempt, the same idempotency key).
    RunAgain,
    /// Fail the step with this error.
    Fail(String),
}

impl Reconciliation {
    /// Returns the answer's wire name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Happened(_) => "happened",
            Self::RunAgain => "run_again",
            Self::Fail(_) => "fail",
        }
    }
}

/// Applies an operator's answer to a step whose outcome is unknown (`step.outcome_unknown`).
pub fn reconcile(
    state: &ExecutionState,
    step_id: &StepId,
    answer: &Reconciliation,
    by: Option<String>,
    now: Timestamp,
    settings: &ExecutionSettings,
) -> Result<Transition, Rejection> {
    if state.status.is_terminal() {
        return Err(Rejection::Terminal {
            execution: state.id.to_string(),
            status: state.status,
        });
    }
    let step = state
        .step(step_id)
        .ok_or_else(|| Rejection::StepNotFound(step_id.to_string()))?;
    if !step.outcome_unknown || step.status.is_terminal() {
        return Err(Rejection::OutcomeKnown(step_id.to_string()));
    }
    let mut transition = Transition::default();
    transition.event(NewEvent::step(
        step_id,
        EventBody::StepReconciled {
            answer: answer.name().to_owned(),
            by,
        },
    ));
    let outcome = |success: bool, data: Option<Value>, error: Option<String>| StepOutcome {
        step_id: step_id.clone(),
        success,
        data,
        error,
        retryable: false,
        cost: None,
    };
    let rest = match answer {
        Reconciliation::Happened(result) => {
            final_result(state, step, &outcome(true, Some(result.clone()), None))
        }
        Reconciliation::Fail(error) => {
            final_result(state, step, &outcome(false, None, Some(error.clone())))
        }
        Reconciliation::RunAgain => {
            let mut again = Transition::default();
            let next_attempt = step.attempt + 1;
            again.event(NewEvent::step(
                step_id,
                EventBody::StepRetried {
                    next_attempt,
                    not_before: None,
                },
            ));
            again.effect(Effect::EnqueueJob(JobSpec {
                job_id: JobId::generate(),
                execution_id: state.id.clone(),
                step_id: step_id.clone(),
                attempt: next_attempt,
                tool_id: step.tool_id.clone(),
                arguments: step.arguments.clone(),
                deadline: add(now, step_timeout(step, settings)),
                not_before: None,
                traceparent: None,
                idempotency_key: None,
            }));
            again
        }
    };
    transition.events.extend(rest.events);
    transition.effects.extend(rest.effects);
    Ok(transition)
}

/// Records that a runner started a step; a no-op for running or ended steps.
pub fn step_started(
    state: &ExecutionState,
    step_id: &StepId,
    runner_id: &RunnerId,
) -> Result<Transition, Rejection> {
    let step = state
        .step(step_id)
        .ok_or_else(|| Rejection::StepNotFound(step_id.to_string()))?;
    let mut transition = Transition::default();
    if !step.status.is_terminal() && step.status != StepStatus::Running && !step.awaiting_approval {
        transition.event(NewEvent::step(
            step_id,
            EventBody::StepStarted {
                runner_id: runner_id.to_owned(),
            },
        ));
    }
    Ok(transition)
}

/// Checks that a queued job may still be delivered and returns the event recording its
/// delivery (if any). A job for an ended step, an older attempt or an ended execution is stale.
pub fn claim_job(
    state: &ExecutionState,
    job: &JobSpec,
    runner_id: &RunnerId,
    now: Timestamp,
    settings: &ExecutionSettings,
) -> Option<(Transition, JobSpec)> {
    if state.status.is_terminal() || state.status == ExecutionStatus::Pending {
        return None;
    }
    let step = state.step(&job.step_id)?;
    if step.status.is_terminal() || step.attempt != job.attempt || step.awaiting_approval {
        return None;
    }
    let mut transition = Transition::default();
    let mut delivered = job.clone();
    delivered.idempotency_key = Some(step.idempotency_key(&state.id));
    if step.status == StepStatus::Pending {
        let deadline = add(now, step_timeout(step, settings));
        delivered.deadline = deadline;
        transition.event(NewEvent::step(
            &step.id,
            EventBody::StepDispatched {
                runner_id: runner_id.clone(),
                job_id: job.job_id.clone(),
                deadline,
            },
        ));
    } else if step.job_id.as_ref() != Some(&job.job_id) {
        return None;
    } else if step.at_most_once && step.runner_id.is_none() {
        // The log must know the job left the kernel: after a restart a delivered job of an
        // at-most-once step is never queued again (its outcome is unknown), an undelivered one is.
        transition.event(NewEvent::step(
            &step.id,
            EventBody::StepDispatched {
                runner_id: runner_id.clone(),
                job_id: job.job_id.clone(),
                deadline: step.deadline.unwrap_or(job.deadline),
            },
        ));
    }
    Some((transition, delivered))
}
