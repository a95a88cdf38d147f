//! `keel bench`: a load generator that plays agent consumers and runners over real HTTP/SSE
//! against a kernel (or one it starts in-process with `--embedded`), creates executions with a
//! bounded number in flight, and reports executions/s, latency percentiles and kernel memory.
//!
//! Each execution runs `--tools-per-execution` tool calls, alternating local (`bench.local`:
//! intent, then the agent's step result) and remote (`bench.remote`: intent, then a runner
//! executes the job and the agent waits for `tool.result`), then `complete`. The run stops when
//! every execution finished or at `--duration`, whichever comes first.

mod agent;
mod embedded;
mod report;
mod runner;

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::json;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::cli::{CliError, Client};
use crate::config::{ClientConfig, OutputFormat, parse_duration};
pub use embedded::EmbeddedKernel;
pub use report::{LatencySummary, Memory, Stats, read_memory};

/// Tool the agents run themselves.
pub const LOCAL_TOOL: &str = "bench.local";
/// Tool the runners run.
pub const REMOTE_TOOL: &str = "bench.remote";
/// How long the agents and runners may take to connect.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the end-of-run clean-up (cancelling unfinished executions) may take.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(5);

/// Flags of `keel bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Executions to create.
    #[arg(long, value_name = "N", default_value = "200")]
    pub executions: u64,
    /// Executions in flight at most.
    #[arg(long, value_name = "C", default_value = "16")]
    pub concurrency: usize,
    /// Tool calls per execution, alternating local and remote (the first is local).
    #[arg(long, value_name = "K", default_value = "4")]
    pub tools_per_execution: u32,
    /// Agent consumers (SSE connections) to play.
    #[arg(long, value_name = "N", default_value = "2")]
    pub agents: usize,
    /// Runner connections to play.
    #[arg(long, value_name = "M", default_value = "4")]
    pub runners: usize,
    /// Stop after this long, finished or not.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Kernel process id whose memory is reported (VmRSS/VmHWM from /proc/PID/status).
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
    /// Start a kernel inside this process (127.0.0.1, free port, temporary SQLite) instead of
    /// using --url; its memory (shared with the bench) is reported.
    #[arg(long)]
    pub embedded: bool,
    /// Agent id of the executions [default: bench-<random>, so other agents are not disturbed].
    #[arg(long, value_name = "AGENT")]
    pub agent_id: Option<String>,
    /// Kernel connection and output flags.
    #[command(flatten)]
    pub client: ClientConfig,
}

/// State shared by the bench's tasks.
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

/// Runs the bench and prints its report; fails when a request failed or nothing completed.
pub async fn run(args: BenchArgs) -> Result<(), CliError> {
    check_args(&args)?;
    let embedded = if args.embedded {
        Some(EmbeddedKernel::start().await?)
    } else {
        None
    };
    let mut client_config = args.client.clone();
    if let Some(kernel) = &embedded {
        client_config.url = kernel.url.clone();
        client_config.token = None;
    }
    let client = Client::new(&client_config)?;
    client.get("/v0/health", &[]).await?;
    let pid = args
        .pid
        .or_else(|| embedded.as_ref().map(|_| std::process::id()));
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    let shape = report::RunShape {
        url: client.base_url().to_owned(),
        embedded: embedded.is_some(),
        executions: args.executions,
        concurrency: args.concurrency,
        tools_per_execution: args.tools_per_execution,
        agents: args.agents,
        runners: args.runners,
    };
    let shared = Arc::new(Shared {
        client,
        stats: Stats::new(),
        stop: CancellationToken::new(),
        agent_id: args
            .agent_id
            .clone()
            .unwrap_or_else(|| format!("bench-{}", &suffix[..8])),
        runner_id: format!("bench-runner-{}", &suffix[..8]),
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

    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + args.duration;
    let created_ids = create_all(&shared, args.executions, deadline).await;
    let all_done = async {
        while shared.stats.finished() < created_ids.len() as u64 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let capped = tokio::time::timeout_at(deadline, all_done).await.is_err();
    let elapsed = started.elapsed();
    let memory = pid.and_then(read_memory);
    shared.stop.cancel();
    for task in tasks {
        task.abort();
    }
    if capped {
        cancel_unfinished(&shared, &created_ids).await;
    }
    if let Some(kernel) = embedded {
        kernel.stop().await?;
    }

    match args.client.output {
        OutputFormat::Text => crate::cli::output::emit(&report::report_text(
            &shape,
            &shared.stats,
            elapsed,
            memory,
            capped,
        )),
        OutputFormat::Json => crate::cli::output::emit(&crate::cli::output::pretty(
            &report::report_json(&shape, &shared.stats, elapsed, memory, capped),
        )),
    }
    let errors = shared.stats.errors.load(Ordering::Relaxed);
    if errors > 0 {
        return Err(CliError::Failed(format!(
            "{errors} request(s) failed during the bench"
        )));
    }
    if shared.stats.completed.load(Ordering::Relaxed) == 0 {
        return Err(CliError::Failed("no execution completed".to_owned()));
    }
    Ok(())
}

/// Rejects flag combinations that cannot run.
fn check_args(args: &BenchArgs) -> Result<(), CliError> {
    let invalid = |what, message: &str| {
        Err(CliError::InvalidArgument {
            what,
            message: message.to_owned(),
        })
    };
    if args.executions == 0 {
        return invalid("--executions", "must be at least 1");
    }
    if args.concurrency == 0 {
        return invalid("--concurrency", "must be at least 1");
    }
    if args.agents == 0 {
        return invalid("--agents", "must be at least 1");
    }
    if args.tools_per_execution >= 2 && args.runners == 0 {
        return invalid(
            "--runners",
            "must be at least 1 when executions call remote tools",
        );
    }
    if args.duration.is_zero() {
        return invalid("--duration", "must be greater than zero");
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
            match shared.client.post("/v0/executions", Some(&body)).await {
                Ok(execution) => {
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
