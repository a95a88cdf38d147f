//! `keel bench run` without `--local-steps`: executions of `--tools-per-execution` tool calls
//! alternating local (`bench.local`: intent, then the agent's step result) and remote
//! (`bench.remote`: intent, then a runner executes the job and the agent waits for
//! `tool.result`), then `complete`; at most `--concurrency` in flight over `--agents`
//! consumers and `--runners` runner connections. The run stops when every execution finished
//! or at `--duration`, whichever comes first; unfinished executions are then cancelled.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::procfs::{CpuMeter, read_memory};
use super::progress::Progress;
use super::report::{Report, Stats};
use super::{RunArgs, Target, agent, bench_id, emit, invalid, runner, verdict};
use crate::cli::{CliError, Client};
use crate::config::ClientConfig;

/// How long the agents and runners may take to connect.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the end-of-run clean-up (cancelling unfinished executions) may take.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(5);

/// State shared by the run's tasks.
pub(crate) struct Shared {
    /// Client of the kernel under test.
    pub client: Client,
    /// What was measured.
    pub stats: Stats,
    /// Cancelled when the run ends.
    pub stop: CancellationToken,
    /// Agent id of every execution of this run.
    pub agent_id: String,
    /// Runner id of every runner connection.
    pub runner_id: String,
    /// Tool calls per execution.
    pub tools_per_execution: u32,
    /// Free slots for executions in flight.
    pub slots: Semaphore,
    /// One permit per connected stream (agents and runners).
    pub connected: Semaphore,
    /// Start of the run, origin of the `created_us` input field.
    pub origin: Instant,
    /// Executions already counted as finished (a re-assignment is not counted twice).
    pub finished: Mutex<HashSet<String>>,
}

impl Shared {
    /// Counts a finished execution once and frees its slot.
    pub fn finish(
        &self,
        execution_id: &str,
        outcome: Result<(), String>,
        created_micros: Option<u64>,
    ) {
        let first_time = self
            .finished
            .lock()
            .is_ok_and(|mut finished| finished.insert(execution_id.to_owned()));
        if !first_time {
            return;
        }
        match outcome {
            Ok(()) => {
                self.stats.completed.fetch_add(1, Ordering::Relaxed);
                if let Some(created) = created_micros {
                    let now = u64::try_from(self.origin.elapsed().as_micros()).unwrap_or(u64::MAX);
                    self.stats
                        .execution
                        .record(Duration::from_micros(now.saturating_sub(created)));
                }
            }
            Err(error) => {
                self.stats.abandoned.fetch_add(1, Ordering::Relaxed);
                self.stats
                    .error(format!("execution {execution_id}: {error}"));
            }
        }
        self.slots.add_permits(1);
    }
}

/// Runs the mixed closed loop and prints its report.
pub async fn run(args: RunArgs) -> Result<(), CliError> {
    check_args(&args)?;
    let target = Target::connect(&args.target).await?;
    let client = Client::new(&ClientConfig {
        url: Some(target.http.base_url().to_owned()),
        token: if target.embedded.is_some() {
            None
        } else {
            args.target.client.token().map(str::to_owned)
        },
        rebuno_url: None,
        rebuno_api_key: None,
        ..args.target.client.clone()
    })?;
    let agent_id = args.agent_id.clone().unwrap_or_else(bench_id);
    let shared = Arc::new(Shared {
        client,
        stats: Stats::new(),
        stop: CancellationToken::new(),
        runner_id: format!("{agent_id}-runner"),
        agent_id,
        tools_per_execution: args.tools_per_execution,
        slots: Semaphore::new(args.concurrency),
        connected: Semaphore::new(0),
        origin: Instant::now(),
        finished: Mutex::new(HashSet::new()),
    });

    let mut tasks = Vec::new();
    for index in 0..args.agents {
        tasks.push(tokio::spawn(agent::consume(
            shared.clone(),
            format!("{}-{index}", shared.agent_id),
        )));
    }
    for index in 0..args.runners {
        tasks.push(tokio::spawn(runner::serve(
            shared.clone(),
            format!("{}-{index}", shared.runner_id),
        )));
    }
    let streams = u32::try_from(args.agents + args.runners).unwrap_or(u32::MAX);
    if tokio::time::timeout(CONNECT_TIMEOUT, shared.connected.acquire_many(streams))
        .await
        .is_err()
    {
        shared.stop.cancel();
        return Err(CliError::Failed(format!(
            "agents and runners did not connect within {CONNECT_TIMEOUT:?}"
        )));
    }

    let cpu = CpuMeter::start(target.pid);
    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + args.duration;
    let progress = {
        let shared = shared.clone();
        Progress::start("run".to_owned(), Some(args.executions), move || {
            shared.stats.completed.load(Ordering::Relaxed)
        })
    };
    let created_ids = create_all(&shared, args.executions, deadline).await;
    let all_done = async {
        while shared.stats.finished() < created_ids.len() as u64 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let capped = tokio::time::timeout_at(deadline, all_done).await.is_err();
    let elapsed = started.elapsed();
    let usage = cpu.stop();
    let memory = target.pid.and_then(read_memory);
    drop(progress);
    shared.stop.cancel();
    for task in tasks {
        task.abort();
    }
    if capped {
        cancel_unfinished(&shared, &created_ids).await;
    }

    let stats = &shared.stats;
    let completed = stats.completed.load(Ordering::Relaxed);
    let created = stats.created.load(Ordering::Relaxed);
    let local = args.tools_per_execution.div_ceil(2);
    let remote = args.tools_per_execution / 2;
    let mut report = Report::new(
        "run",
        target.http.base_url(),
        target.embedded.is_some(),
        format!(
            "keel bench run against {}{}: {} executions x {} tools ({local} local, {remote} remote), concurrency {}, {} agents, {} runners",
            target.http.base_url(),
            if target.embedded.is_some() {
                " (embedded)"
            } else {
                ""
            },
            args.executions,
            args.tools_per_execution,
            args.concurrency,
            args.agents,
            args.runners,
        ),
    );
    report.field("mode", "mixed");
    report.field("concurrency", args.concurrency);
    report.field("agents", args.agents);
    report.field("runners", args.runners);
    report.field("tools_per_execution", args.tools_per_execution);
    report.field("local_steps", local);
    report.field(
        "executions",
        json!({
            "requested": args.executions,
            "created": created,
            "completed": completed,
            "abandoned": stats.abandoned.load(Ordering::Relaxed),
        }),
    );
    report.field("duration_capped", capped);
    report.field("remote_jobs", stats.jobs.load(Ordering::Relaxed));
    report.throughput(completed, elapsed.as_secs_f64(), "executions");
    report.field(
        "executions_per_s",
        report.to_json()["throughput_per_s"].clone(),
    );
    if capped {
        report.line(
            "",
            format!(
                "(stopped by --duration: {} unfinished, {} never created)",
                created.saturating_sub(completed),
                args.executions.saturating_sub(created)
            ),
        );
    }
    report.latency("execution", "execution", stats.execution.summary());
    report.latency("intent", "intent", stats.intent.summary());
    report.latency("step_result", "step result", stats.step_result.summary());
    report.latency("remote_tool", "remote tool", stats.remote_tool.summary());
    report.resources(usage, completed, memory, target.embedded.is_some());
    report.errors(&stats.errors);
    let output = target.output;
    target.finish().await?;
    emit(&report, output);
    verdict(stats.errors.count(), completed, "execution completed")
}

/// Rejects flag combinations that cannot run.
fn check_args(args: &RunArgs) -> Result<(), CliError> {
    if args.executions == 0 {
        return Err(invalid("--executions", "must be at least 1"));
    }
    if args.concurrency == 0 {
        return Err(invalid("--concurrency", "must be at least 1"));
    }
    if args.agents == 0 {
        return Err(invalid("--agents", "must be at least 1"));
    }
    if args.tools_per_execution >= 2 && args.runners == 0 {
        return Err(invalid(
            "--runners",
            "must be at least 1 when executions call remote tools",
        ));
    }
    if args.duration.is_zero() {
        return Err(invalid("--duration", "must be greater than zero"));
    }
    if !args.warmup.is_zero() {
        return Err(invalid("--warmup", "needs --local-steps"));
    }
    Ok(())
}

/// Creates executions as slots free up, until all are created or the deadline passes; returns
/// the ids created.
async fn create_all(
    shared: &Arc<Shared>,
    executions: u64,
    deadline: tokio::time::Instant,
) -> Vec<String> {
    let mut creations = tokio::task::JoinSet::new();
    for index in 0..executions {
        let permit = tokio::select! {
            permit = shared.slots.acquire() => permit,
            () = tokio::time::sleep_until(deadline) => break,
        };
        let Ok(permit) = permit else {
            break;
        };
        // The agent's handler gives the slot back when the execution finishes.
        permit.forget();
        let shared = shared.clone();
        creations.spawn(async move {
            let created_us = u64::try_from(shared.origin.elapsed().as_micros()).unwrap_or(u64::MAX);
            let body = json!({
                "agent_id": shared.agent_id,
                "input": { "index": index, "created_us": created_us },
                "labels": { "bench": "true" },
            });
            let started = Instant::now();
            match shared.client.post("/v0/executions", Some(&body)).await {
                Ok(execution) => {
                    shared.stats.create.record(started.elapsed());
                    shared.stats.created.fetch_add(1, Ordering::Relaxed);
                    execution
                        .get("id")
                        .and_then(|id| id.as_str())
                        .map(str::to_owned)
                }
                Err(error) => {
                    shared.stats.error(format!("create: {error}"));
                    shared.slots.add_permits(1);
                    None
                }
            }
        });
    }
    let mut created = Vec::new();
    while let Some(joined) = creations.join_next().await {
        if let Ok(Some(id)) = joined {
            created.push(id);
        }
    }
    created
}

/// Cancels executions of this run that did not finish, so they do not linger on the kernel.
async fn cancel_unfinished(shared: &Shared, created: &[String]) {
    let finished = shared
        .finished
        .lock()
        .map(|finished| finished.clone())
        .unwrap_or_default();
    let cleanup = async {
        for id in created.iter().filter(|id| !finished.contains(*id)) {
            let path = format!("/v0/executions/{}/cancel", crate::cli::path_segment(id));
            let _ = shared.client.post(&path, None).await;
        }
    };
    if tokio::time::timeout(CLEANUP_TIMEOUT, cleanup)
        .await
        .is_err()
    {
        tracing::warn!("some unfinished bench executions were not cancelled in time");
    }
}
