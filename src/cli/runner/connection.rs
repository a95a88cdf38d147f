//! The runner side of the protocol, as the rebuno SDK's `Runner` speaks it: before every
//! connect the tool schemas are published (`POST /v0/runners/{id}/tools`), then the stream
//! `GET /v0/runners/stream?runner_id=&consumer_id=&capabilities=` is read; each `job.assigned`
//! becomes a task that acknowledges the job (`POST /v0/runners/steps/{step}/started`, errors
//! ignored), runs a worker and posts the result (`POST /v0/runners/{id}/results` with the
//! connection's `consumer_id`, replayed until the kernel answers). A job's task outlives a
//! dropped stream: the connection reconnects with the same `consumer_id` and the result is
//! posted as usual. `job.cancelled` kills the job's worker.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use eventsource_stream::Eventsource;
use futures::StreamExt;
use reqwest::StatusCode;
use serde_json::Value;
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;

use super::child::{self, RunEnd, TimeLimit, WorkerSpec};
use super::mcp::McpServer;
use super::protocol::{self, Ending, Job, Outcome};
use crate::cli::{CliError, Client, path_segment};

/// First pause before reconnecting; doubled after each failure up to [`RECONNECT_MAX`].
const RECONNECT_MIN: Duration = Duration::from_millis(500);
/// Longest pause between reconnects.
const RECONNECT_MAX: Duration = Duration::from_secs(5);
/// How long a result is replayed while the kernel cannot be reached.
const RESULT_REPLAY_WINDOW: Duration = Duration::from_secs(600);

/// What every connection and job of one `keel runner` shares.
pub struct Shared {
    /// Kernel client.
    pub client: Client,
    /// Runner id.
    pub runner_id: String,
    /// Body of `POST /v0/runners/{id}/tools`.
    pub tools_body: Value,
    /// Tool ids served.
    pub tools: HashSet<String>,
    /// What runs the jobs.
    pub backend: Backend,
    /// Wall-time limit per job, on top of the job's own deadline.
    pub timeout: Option<Duration>,
    /// Whether worker failures (crash, garbage, kill) are reported as retryable.
    pub worker_failures_retryable: bool,
    /// Workers allowed at once.
    pub slots: Semaphore,
    /// Running jobs by job id, to cancel their workers.
    pub jobs: Mutex<HashMap<String, CancellationToken>>,
    /// Cancelled when the runner stops taking jobs (streams close).
    pub stop: CancellationToken,
    /// Cancelled when the runner kills the workers still running.
    pub kill: CancellationToken,
    /// Jobs in hand.
    pub in_flight: InFlight,
}

/// What runs a runner's jobs.
pub enum Backend {
    /// `--exec`: a fresh worker process per job.
    Exec(WorkerSpec),
    /// `--mcp`: a `tools/call` to the MCP server.
    Mcp(Arc<McpServer>),
}

/// Keeps one runner connection open until the runner stops, reconnecting when it drops.
pub async fn serve(shared: Arc<Shared>, consumer_id: String) {
    let runner = path_segment(&shared.runner_id);
    let mut capabilities: Vec<&str> = shared.tools.iter().map(String::as_str).collect();
    capabilities.sort_unstable();
    let query = [
        ("runner_id", shared.runner_id.clone()),
        ("consumer_id", consumer_id.clone()),
        ("capabilities", capabilities.join(",")),
    ];
    let mut delay = RECONNECT_MIN;
    let publish_path = format!("/v0/runners/{runner}/tools");
    while !shared.stop.is_cancelled() {
        let body = match &shared.backend {
            Backend::Mcp(server) => server.tools_body(),
            Backend::Exec(_) => shared.tools_body.clone(),
        };
        let publish = shared.client.post(&publish_path, Some(&body));
        if let Err(error) = publish.await {
            tracing::warn!(%error, "cannot publish the tool schemas");
        }
        let opened = tokio::select! {
            opened = shared.client.stream("/v0/runners/stream", &query) => opened,
            () = shared.stop.cancelled() => return,
        };
        match opened {
            Ok(response) => {
                tracing::info!(consumer_id, "runner connection open");
                delay = RECONNECT_MIN;
                let mut messages = response.bytes_stream().eventsource();
                loop {
                    let message = tokio::select! {
                        message = messages.next() => message,
                        () = shared.stop.cancelled() => return,
                    };
                    match message {
                        Some(Ok(message)) => {
                            on_message(&shared, &consumer_id, &message.event, &message.data)
                        }
                        Some(Err(error)) => {
                            tracing::warn!(consumer_id, %error, "runner stream lost; reconnecting");
                            break;
                        }
                        None => {
                            tracing::info!(consumer_id, "runner stream ended; reconnecting");
                            break;
                        }
                    }
                }
            }
            Err(error) => {
                tracing::warn!(consumer_id, %error, "cannot open the runner stream; retrying");
                delay = (delay * 2).min(RECONNECT_MAX);
            }
        }
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = shared.stop.cancelled() => return,
        }
    }
}

/// Handles one message of the runner stream.
fn on_message(shared: &Arc<Shared>, consumer_id: &str, event: &str, data: &str) {
    match event {
        "job.assigned" => match protocol::parse_job(data) {
            Ok(job) => {
                let guard = shared.in_flight.enter();
                let task = run_job(shared.clone(), consumer_id.to_owned(), job);
                tokio::spawn(async move {
                    task.await;
                    drop(guard);
                });
            }
            Err(error) => tracing::warn!(%error, data, "ignoring a malformed job.assigned"),
        },
        "job.cancelled" => match serde_json::from_str::<protocol::Cancellation>(data) {
            Ok(notice) => {
                let token = shared
                    .jobs
                    .lock()
                    .ok()
                    .and_then(|jobs| jobs.get(&notice.job_id).cloned());
                if let Some(token) = token {
                    tracing::info!(job_id = notice.job_id, reason = ?notice.reason, "job cancelled; killing its worker");
                    token.cancel();
                }
            }
            Err(error) => tracing::warn!(%error, data, "ignoring a malformed job.cancelled"),
        },
        _ => {}
    }
}

/// Runs one job: acknowledge, run the worker, post the result.
async fn run_job(shared: Arc<Shared>, consumer_id: String, job: Job) {
    let cancel = CancellationToken::new();
    if let Ok(mut jobs) = shared.jobs.lock() {
        jobs.insert(job.id.clone(), cancel.clone());
    }
    let outcome = job_outcome(&shared, &job, &cancel).await;
    if let Ok(mut jobs) = shared.jobs.lock() {
        jobs.remove(&job.id);
    }
    if let Some(outcome) = outcome {
        post_result(&shared, &job, &consumer_id, &outcome).await;
    }
}

/// Runs the worker of a job; `None` when the kernel cancelled the job.
async fn job_outcome(shared: &Shared, job: &Job, cancel: &CancellationToken) -> Option<Outcome> {
    if !shared.tools.contains(&job.tool_id) {
        let message = format!("No handler registered for tool '{}'", job.tool_id);
        return Some(Outcome::failure(message, false));
    }
    let _permit = tokio::select! {
        permit = shared.slots.acquire() => permit.ok()?,
        () = cancel.cancelled() => return None,
        () = shared.stop.cancelled() => {
            return Some(protocol::outcome(&Ending::ShuttingDown, b"", "", true));
        }
    };
    let started =
        serde_json::json!({ "execution_id": job.execution_id, "runner_id": shared.runner_id });
    let path = format!("/v0/runners/steps/{}/started", path_segment(&job.step_id));
    // The SDK ignores errors of this call too.
    let _ = shared.client.post(&path, Some(&started)).await;
    let limit = time_limit(job, shared.timeout);
    tracing::info!(
        job_id = job.id,
        tool_id = job.tool_id,
        attempt = job.attempt,
        "running a worker"
    );
    let worker = match &shared.backend {
        Backend::Exec(worker) => worker,
        Backend::Mcp(server) => return mcp_outcome(shared, server, job, limit, cancel).await,
    };
    let line = protocol::job_line(job);
    let env: Vec<(&str, String)> = job
        .idempotency_key
        .iter()
        .map(|key| (protocol::IDEMPOTENCY_KEY_ENV, key.clone()))
        .collect();
    match child::run(worker, line, &env, limit, cancel, &shared.kill).await {
        RunEnd::Cancelled => None,
        RunEnd::Finished {
            ending,
            stdout,
            stderr_tail,
        } => {
            let outcome = protocol::outcome(
                &ending,
                &stdout,
                &stderr_tail,
                shared.worker_failures_retryable,
            );
            tracing::info!(
                job_id = job.id,
                success = outcome.success,
                error = outcome.error.as_deref(),
                "worker finished"
            );
            Some(outcome)
        }
    }
}

/// Runs a job as an MCP `tools/call`; `None` when the kernel cancelled the job. Leaving the
/// call (cancel, time limit) drops it, which sends `notifications/cancelled`; the server is
/// then checked for being stuck in it ([`McpServer::after_cancel`]).
async fn mcp_outcome(
    shared: &Shared,
    server: &Arc<McpServer>,
    job: &Job,
    limit: Option<TimeLimit>,
    cancel: &CancellationToken,
) -> Option<Outcome> {
    let time_limit = async {
        match &limit {
            Some(limit) => tokio::time::sleep_until(limit.at).await,
            None => std::future::pending().await,
        }
    };
    let (sink, updates) = super::mcp::progress_channel();
    let relay = super::progress::relay(shared, job, updates);
    let call = async {
        // The call's end drops the sink, which ends the relay once it posted the rest.
        let (outcome, ()) =
            tokio::join!(server.call(&job.tool_id, &job.arguments, Some(sink)), relay);
        outcome
    };
    let outcome = tokio::select! {
        outcome = call => outcome,
        () = cancel.cancelled() => {
            tracing::info!(job_id = job.id, "MCP call cancelled");
            tokio::spawn(server.clone().after_cancel());
            return None;
        }
        () = time_limit => {
            tokio::spawn(server.clone().after_cancel());
            let why = limit.map(|limit| limit.why).unwrap_or_default();
            Outcome::failure(format!("MCP call cancelled: {why}"), shared.worker_failures_retryable)
        }
        () = shared.kill.cancelled() => protocol::outcome(&Ending::ShuttingDown, b"", "", true),
    };
    tracing::info!(
        job_id = job.id,
        success = outcome.success,
        error = outcome.error.as_deref(),
        "MCP call finished"
    );
    Some(outcome)
}

/// The earlier of the job's deadline and the runner's wall-time limit.
fn time_limit(job: &Job, timeout: Option<Duration>) -> Option<TimeLimit> {
    let now = tokio::time::Instant::now();
    let deadline = job
        .deadline
        .as_deref()
        .and_then(|text| chrono::DateTime::parse_from_rfc3339(text).ok())
        .filter(|deadline| deadline.timestamp() > 0)
        .map(|deadline| {
            let left = deadline.signed_duration_since(chrono::Utc::now());
            TimeLimit {
                at: now + left.to_std().unwrap_or_default(),
                why: format!(
                    "the job's deadline {} passed",
                    job.deadline.as_deref().unwrap_or_default()
                ),
            }
        });
    let wall = timeout.map(|timeout| TimeLimit {
        at: now + timeout,
        why: format!(
            "wall time limit of {} exceeded",
            crate::config::format_duration(timeout)
        ),
    });
    match (deadline, wall) {
        (Some(deadline), Some(wall)) => Some(if wall.at < deadline.at {
            wall
        } else {
            deadline
        }),
        (deadline, wall) => deadline.or(wall),
    }
}

/// Posts a result, replaying it while the kernel cannot be reached or answers 5xx/429.
async fn post_result(shared: &Shared, job: &Job, consumer_id: &str, outcome: &Outcome) {
    let path = format!("/v0/runners/{}/results", path_segment(&shared.runner_id));
    let body = outcome.body(job, consumer_id);
    let give_up = tokio::time::Instant::now() + RESULT_REPLAY_WINDOW;
    let mut delay = RECONNECT_MIN;
    loop {
        match shared.client.post(&path, Some(&body)).await {
            Ok(_) => return,
            Err(CliError::Api {
                status,
                code,
                message,
            }) if status.is_client_error() && status != StatusCode::TOO_MANY_REQUESTS => {
                // 409 `step already resolved`: the step ended by another path meanwhile.
                tracing::warn!(job_id = job.id, %status, code, message, "the kernel refused the result");
                return;
            }
            Err(error) => {
                if tokio::time::Instant::now() + delay > give_up {
                    tracing::error!(job_id = job.id, %error, "giving up posting a result");
                    return;
                }
                tracing::warn!(job_id = job.id, %error, "cannot post a result; retrying");
            }
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(RECONNECT_MAX);
    }
}

/// Counts jobs in hand and wakes whoever waits for none to be left.
#[derive(Clone, Default)]
pub struct InFlight(Arc<Counter>);

#[derive(Default)]
struct Counter {
    count: AtomicUsize,
    idle: Notify,
}

/// Held while a job is in hand.
pub struct InFlightGuard(Arc<Counter>);

impl InFlight {
    /// Counts one more job until the guard is dropped.
    pub fn enter(&self) -> InFlightGuard {
        self.0.count.fetch_add(1, Ordering::SeqCst);
        InFlightGuard(self.0.clone())
    }

    /// Returns the number of jobs in hand.
    pub fn count(&self) -> usize {
        self.0.count.load(Ordering::SeqCst)
    }

    /// Resolves once no job is in hand.
    pub async fn wait_idle(&self) {
        loop {
            let notified = self.0.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.count() == 0 {
                return;
            }
            notified.await;
        }
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}
