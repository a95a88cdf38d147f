//! The `restart` scenario after the kernel came back: a first new execution served end to end,
//! and the check that the old executions go on as their agents reconnect.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::LOCAL_TOOL;
use super::RestartArgs;
use super::fanout::{Counters, signal_all};
use super::http::{Http, Intent, StepData};
use super::latency::Latency;
use super::local::wait_assigned;
use super::parker::{OnAssign, Parker, Sessions};
use super::procfs::{CpuMeter, CpuUsage};
use super::progress::Progress;
use super::report::Errors;
use super::restart::remaining;
use crate::cli::CliError;

/// How long the agents may take to connect.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// What the check of the old executions found.
pub(super) struct Verified {
    /// Blocked executions signalled.
    pub(super) signalled: u64,
    /// Of them (or other blocked ones), executions completed.
    pub(super) blocked_resumed: u64,
    /// Seconds until the signalled ones completed.
    pub(super) blocked_s: f64,
    /// Pending executions completed.
    pub(super) pending_completed: u64,
    /// Seconds until every pending one completed.
    pub(super) pending_s: f64,
    /// The signal requests.
    pub(super) signals: Arc<Counters>,
    /// `complete` intents of both agents.
    pub(super) complete_latency: Latency,
    /// CPU spent meanwhile.
    pub(super) cpu: CpuUsage,
}

/// Reconnects the old agents, signals a sample of the blocked executions and waits for them
/// and for every pending one to complete.
#[allow(clippy::too_many_arguments)]
pub(super) async fn verify(
    args: &RestartArgs,
    http: &Http,
    pid: u32,
    parked: &Parker,
    blocked_ids: &[String],
    pending_agent: &str,
    pending: u64,
    errors: &Arc<Errors>,
    deadline: tokio::time::Instant,
) -> Result<Verified, CliError> {
    let cpu = CpuMeter::start(Some(pid));
    let started = Instant::now();
    let blocked_agent = Parker::new(
        http.clone(),
        parked.agent_id().to_owned(),
        OnAssign::Complete,
        parked.sessions(),
        errors.clone(),
    );
    let pending_agent = Parker::new(
        http.clone(),
        pending_agent.to_owned(),
        OnAssign::Complete,
        Sessions::default(),
        errors.clone(),
    );
    blocked_agent
        .connect(args.agents, CONNECT_TIMEOUT)
        .await
        .map_err(CliError::Failed)?;
    pending_agent
        .connect(args.agents, CONNECT_TIMEOUT)
        .await
        .map_err(CliError::Failed)?;
    let sample: Vec<String> = blocked_ids
        .iter()
        .take(usize::try_from(args.verify_sample).unwrap_or(usize::MAX))
        .cloned()
        .collect();
    let signalled = sample.len() as u64;
    let signals = Counters::new(errors);
    let _progress = {
        let (blocked, waiting) = (blocked_agent.clone(), pending_agent.clone());
        Progress::start(
            "restart: resume".to_owned(),
            Some(signalled + pending),
            move || {
                blocked.completed.load(Ordering::Relaxed)
                    + waiting.completed.load(Ordering::Relaxed)
            },
        )
    };
    signal_all(http, Arc::new(sample), args.concurrency, &signals).await;
    if !Parker::wait_for(&blocked_agent.completed, signalled, remaining(deadline)).await {
        errors.record("not every signalled blocked execution completed in time");
    }
    let blocked_s = started.elapsed().as_secs_f64();
    if !Parker::wait_for(&pending_agent.completed, pending, remaining(deadline)).await {
        errors.record("not every pending execution completed in time");
    }
    let pending_s = started.elapsed().as_secs_f64();
    let cpu = cpu.stop();
    blocked_agent.stop();
    pending_agent.stop();
    let complete_latency = Latency::new();
    complete_latency.merge(&blocked_agent.complete_latency);
    complete_latency.merge(&pending_agent.complete_latency);
    Ok(Verified {
        signalled,
        blocked_resumed: blocked_agent.completed.load(Ordering::Relaxed),
        blocked_s,
        pending_completed: pending_agent.completed.load(Ordering::Relaxed),
        pending_s,
        signals,
        complete_latency,
        cpu,
    })
}

/// A new agent connects, creates an execution, makes one local step and completes it.
pub(super) async fn first_execution(http: &Http, agent_id: &str) -> Result<(), String> {
    let consumer_id = format!("{agent_id}-consumer");
    let mut stream = http.agent_stream(agent_id, &consumer_id).await?;
    let execution_id = http.create(agent_id, 0).await?;
    let session_id =
        wait_assigned(http, agent_id, &consumer_id, &mut stream, &execution_id).await?;
    let intent = Intent::InvokeTool {
        tool_id: LOCAL_TOOL,
        arguments: StepData { index: 0 },
        idempotency_key: format!("{execution_id}:{LOCAL_TOOL}:0"),
    };
    let step_id = http
        .intent(&execution_id, &session_id, intent)
        .await?
        .ok_or("accepted invoke_tool without step_id")?;
    http.step_result(&execution_id, &session_id, &step_id, 0)
        .await?;
    let output = StepData { index: 1 };
    http.intent(&execution_id, &session_id, Intent::Complete { output })
        .await?;
    Ok(())
}
