//! Who may report on a remote job. Only the runner connection holding a job may post its
//! result or its `started`: a report naming another runner id, another consumer id, or a job
//! that is not the step's current one is refused with 409 and records nothing.
//!
//! The dispatcher is the one place that knows which connection holds which job (it marks a
//! connection busy before the job is written to its stream, so a holder's report always finds
//! it). The HTTP handler asks it through [`check`] before the report reaches the execution.
//! What the dispatcher does not know — a job whose step already ended, an unknown step or
//! execution — is left to the execution, which answers 404 or 409 as WIRE.md §11 says.

use std::sync::Arc;

use ractor::RpcReplyPort;

use super::dispatch::Dispatch;
use super::messages::DispatcherMsg;
use crate::execution::JobSpec;
use crate::ids::{ConsumerId, ExecutionId, JobId, RunnerId, StepId};
use crate::kernel::KernelError;
use crate::kernel::context::{Ctx, call};

/// A runner's report on a job, as the request names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobReport {
    /// Runner id (the result's path, the `started` body).
    pub runner_id: RunnerId,
    /// Consumer id of the reporting connection (results only; `started` does not carry one).
    pub consumer_id: Option<ConsumerId>,
    /// Execution id.
    pub execution_id: ExecutionId,
    /// Step id.
    pub step_id: StepId,
    /// Job id (results only).
    pub job_id: Option<JobId>,
}

/// Where the dispatcher has a job.
enum Place<'a> {
    /// In the hands of a connection, or of one that left and may come back (runner grace).
    Held {
        runner_id: &'a RunnerId,
        consumer_id: &'a ConsumerId,
    },
    /// Recovered after a restart: some runner may hold it, the dispatcher does not know which.
    Recovered,
    /// Waiting in the queue: no runner holds it.
    Queued,
}

/// Asks the dispatcher whether `report` comes from the job's holder: `Ok(Err(reason))` when it
/// does not.
pub async fn check(ctx: &Arc<Ctx>, report: JobReport) -> Result<Result<(), String>, KernelError> {
    let dispatcher = ctx
        .dispatcher()
        .ok_or_else(|| KernelError::Unavailable("dispatcher is not running".into()))?;
    let message =
        |reply: RpcReplyPort<Result<(), String>>| DispatcherMsg::CheckReport { report, reply };
    call(&dispatcher, message, ctx.config.call_timeout, "dispatcher").await
}

/// Decides a report against the dispatcher's state.
pub(super) fn decide(state: &Dispatch, report: &JobReport) -> Result<(), String> {
    let of_step = |job: &JobSpec| job.step_id == report.step_id;
    let Some(job_id) = report.job_id.as_ref() else {
        // `started`: the step's job, whichever it is, must be held by this runner id.
        return match locate(state, of_step) {
            None => Ok(()),
            Some((job, place)) => holder_matches(report, job, &place),
        };
    };
    match locate(state, |job| job.job_id == job_id) {
        Some((job, place)) => {
            if job.step_id != report.step_id || job.execution_id != report.execution_id {
                return Err(format!(
                    "job {job_id} is not a job of step {} of execution {}",
                    report.step_id, report.execution_id
                ));
            }
            holder_matches(report, job, &place)
        }
        None => match locate(state, of_step) {
            Some((current, _)) => Err(format!(
                "job {job_id} is not the current job of step {} (that is {})",
                report.step_id, current.job_id
            )),
            None => Ok(()),
        },
    }
}

fn holder_matches(report: &JobReport, job: &JobSpec, place: &Place<'_>) -> Result<(), String> {
    match place {
        Place::Recovered => Ok(()),
        Place::Queued => Err(format!(
            "job {} of step {} is not held by any runner",
            job.job_id, job.step_id
        )),
        Place::Held {
            runner_id,
            consumer_id,
        } => {
            let same_runner = **runner_id == report.runner_id;
            let same_consumer = report
                .consumer_id
                .as_ref()
                .is_none_or(|given| given == *consumer_id);
            if same_runner && same_consumer {
                Ok(())
            } else {
                Err(format!(
                    "job {} of step {} is held by another runner connection",
                    job.job_id, job.step_id
                ))
            }
        }
    }
}

/// Finds the first job matching `wanted` wherever the dispatcher keeps jobs.
fn locate<'a>(
    state: &'a Dispatch,
    wanted: impl Fn(&JobSpec) -> bool,
) -> Option<(&'a JobSpec, Place<'a>)> {
    for ((runner_id, consumer_id), slot) in &state.connections {
        if let Some(job) = slot.busy.as_ref().filter(|job| wanted(job)) {
            let place = Place::Held {
                runner_id,
                consumer_id,
            };
            return Some((job, place));
        }
    }
    for ((runner_id, consumer_id), (job, _)) in &state.orphans {
        if wanted(job) {
            let place = Place::Held {
                runner_id,
                consumer_id,
            };
            return Some((job, place));
        }
    }
    if let Some(job) = state.held.values().find(|job| wanted(job)) {
        return Some((job, Place::Recovered));
    }
    state
        .queue
        .iter()
        .find(|job| wanted(job))
        .map(|job| (job, Place::Queued))
}
