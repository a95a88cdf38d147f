//! The command line of `keel bench`: the scenarios and their flags. `keel bench` without a
//! scenario takes the flags of `run`, as before scenarios existed.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};

use crate::config::{ClientConfig, OutputFormat, parse_duration};

/// Flags of `keel bench`: a scenario, or the flags of `run` directly.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchArgs {
    /// Scenario to run [default: run].
    #[command(subcommand)]
    pub scenario: Option<Scenario>,
    /// Flags of `run` when no scenario is named.
    #[command(flatten)]
    pub run: RunArgs,
}

/// Scenarios of `keel bench`.
#[derive(Debug, Subcommand)]
pub enum Scenario {
    /// Closed-loop executions (the default): mixed local and remote tool calls, or with
    /// --local-steps K one execution per agent at a time doing K local steps.
    Run(RunArgs),
    /// Parks N executions on a signal, reports kernel memory per parked execution, then
    /// resumes them all.
    Blocked(BlockedArgs),
    /// Starts a kernel, leaves N executions pending or blocked, kill -9s it, restarts it and
    /// times readiness and a first new execution.
    Restart(RestartArgs),
    /// Creates executions with no agent connected and reports creates/s.
    Create(CreateArgs),
    /// Measures what the machine charges an execution before the kernel works: the HTTP
    /// round trip, the kernel's CPU per request and, with --sync-dir, a write + fsync.
    Floor(FloorArgs),
    /// Model calls through the LLM gateway against a fake provider in this process, and the
    /// same calls made to the fake directly: the gateway's overhead (p50/p99, time to first
    /// chunk, kernel CPU per call), plain and streamed, at C=1 and C=--concurrency.
    Llm(LlmArgs),
}

/// Flags of `keel bench llm`.
#[derive(Debug, Args)]
pub struct LlmArgs {
    /// Connections of the loaded phases (each with an execution of its own).
    #[arg(long, value_name = "C", default_value = "64")]
    pub concurrency: usize,
    /// Length of each phase (direct and through the gateway; plain and streamed; C=1 and C).
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Chunks of each streamed answer.
    #[arg(long, value_name = "N", default_value = "16")]
    pub chunks: usize,
    /// Port of the fake provider on 127.0.0.1 (0: any). With --url, start the kernel with an
    /// --llm-config whose provider --provider has `base_url: http://127.0.0.1:PORT/v1`.
    #[arg(long, value_name = "PORT", default_value = "0")]
    pub provider_port: u16,
    /// Provider name in the kernel's gateway configuration.
    #[arg(long, value_name = "NAME", default_value = "bench")]
    pub provider: String,
    /// The kernel under test (its token must hold executions: an admin token or key).
    #[command(flatten)]
    pub target: TargetArgs,
}

/// The kernel under test, for the scenarios that use a running one.
#[derive(Clone, Debug, Args)]
pub struct TargetArgs {
    /// Kernel process id whose CPU time (/proc/PID/stat) and memory (VmRSS/VmHWM of
    /// /proc/PID/status) are reported. `run --local-steps` against several kernels takes one
    /// per kernel (a comma list or the flag repeated) and reports their sums.
    #[arg(long, value_name = "PID", value_delimiter = ',')]
    pub pid: Vec<u32>,
    /// Start a kernel inside this process (127.0.0.1, free port, temporary SQLite) instead of
    /// using --url; its CPU and memory (shared with the bench) are reported.
    #[arg(long)]
    pub embedded: bool,
    /// Kernel connection and output flags.
    #[command(flatten)]
    pub client: ClientConfig,
}

/// Flags of `keel bench run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Executions to create at most.
    #[arg(long, value_name = "N", default_value = "200")]
    pub executions: u64,
    /// Executions in flight at most (with --local-steps: agents, one execution each).
    #[arg(long, value_name = "C", default_value = "16")]
    pub concurrency: usize,
    /// Tool calls per execution, alternating local and remote (the first is local).
    #[arg(long, value_name = "K", default_value = "4")]
    pub tools_per_execution: u32,
    /// Local tool steps per execution, one execution in flight per agent consumer
    /// (--concurrency agents); replaces --tools-per-execution, --agents and --runners.
    #[arg(long, value_name = "K")]
    pub local_steps: Option<u32>,
    /// Agent consumers (SSE connections) to play.
    #[arg(long, value_name = "N", default_value = "2")]
    pub agents: usize,
    /// Runner connections to play.
    #[arg(long, value_name = "M", default_value = "4")]
    pub runners: usize,
    /// Stop creating after this long; executions in flight then finish (--local-steps) or
    /// are cancelled.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    pub duration: Duration,
    /// With --local-steps: run this long first without measuring.
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = parse_duration)]
    pub warmup: Duration,
    // Help text for `--help`: its <placeholders> are not HTML.
    #[allow(rustdoc::invalid_html_tags)]
    /// Agent id of the executions [default: bench-<random>, so other agents are not disturbed;
    /// with --local-steps agent i uses <AGENT>-<i>].
    #[arg(long, value_name = "AGENT")]
    pub agent_id: Option<String>,
    /// The kernel under test.
    #[command(flatten)]
    pub target: TargetArgs,
}

/// Flags of `keel bench blocked`.
#[derive(Debug, Args)]
pub struct BlockedArgs {
    /// Executions to park.
    #[arg(long, value_name = "N", default_value = "1000")]
    pub executions: u64,
    /// Concurrent creation (and signal) requests.
    #[arg(long, value_name = "C", default_value = "64")]
    pub concurrency: usize,
    /// Agent consumers receiving the executions.
    #[arg(long, value_name = "N", default_value = "8")]
    pub agents: usize,
    /// Pause before each memory reading, so the kernel's allocator settles.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub settle: Duration,
    /// Give up after this long in all.
    #[arg(long, value_name = "DURATION", default_value = "15m", value_parser = parse_duration)]
    pub timeout: Duration,
    /// The kernel under test.
    #[command(flatten)]
    pub target: TargetArgs,
}

/// Flags of `keel bench create`.
#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Concurrent creation requests.
    #[arg(long, value_name = "C", default_value = "64")]
    pub concurrency: usize,
    /// Create for this long.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Create at most this many.
    #[arg(long, value_name = "N")]
    pub executions: Option<u64>,
    /// The kernel under test.
    #[command(flatten)]
    pub target: TargetArgs,
}

/// Flags of `keel bench floor`.
#[derive(Debug, Args)]
pub struct FloorArgs {
    /// Local steps K of the execution whose floor is reported (as `run --local-steps K`).
    #[arg(long, value_name = "K", default_value = "5")]
    pub local_steps: u32,
    /// Connections of the loaded phase, which measures the kernel's CPU per request.
    #[arg(long, value_name = "C", default_value = "64")]
    pub concurrency: usize,
    /// Length of each phase (C=1, then C=--concurrency).
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Directory on the kernel's data disk where a probe file is written and fsynced (then
    /// removed) [default: no fsync probe].
    #[arg(long, value_name = "DIR")]
    pub sync_dir: Option<PathBuf>,
    /// Writes + fsyncs of the probe.
    #[arg(long, value_name = "N", default_value = "1000")]
    pub syncs: u32,
    /// The kernel under test.
    #[command(flatten)]
    pub target: TargetArgs,
}

/// Flags of `keel bench restart`.
#[derive(Debug, Args)]
pub struct RestartArgs {
    /// Non-terminal executions left when the kernel is killed: half pending (no agent
    /// connected), half blocked on a signal.
    #[arg(long, value_name = "N", default_value = "1000")]
    pub executions: u64,
    /// Concurrent creation (and signal) requests.
    #[arg(long, value_name = "C", default_value = "64")]
    pub concurrency: usize,
    /// Agent consumers receiving the executions to block.
    #[arg(long, value_name = "N", default_value = "8")]
    pub agents: usize,
    /// Kernel binary to start as `keel dev` [default: this executable].
    #[arg(long, value_name = "PATH")]
    pub kernel_bin: Option<PathBuf>,
    /// Database URL of the started kernel [default: SQLite in a fresh data directory].
    #[arg(long, value_name = "URL")]
    pub db_url: Option<String>,
    /// After the restart, blocked executions to resume by signal (and every pending one is
    /// served by a reconnected agent) to check the old executions go on; 0 skips the check.
    #[arg(long, value_name = "N", default_value = "100")]
    pub verify_sample: u64,
    /// Give up after this long in all.
    #[arg(long, value_name = "DURATION", default_value = "15m", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Output format.
    #[arg(
        long,
        env = "KEEL_OUTPUT",
        value_name = "FORMAT",
        default_value = "text"
    )]
    pub output: OutputFormat,
    /// `RUST_LOG`, read here so that no other module reads the environment.
    #[arg(long = "rust-log", env = "RUST_LOG", hide = true)]
    pub rust_log: Option<String>,
}

impl BenchArgs {
    /// Returns the log filter of the bench: `RUST_LOG` when set, else warnings only.
    pub fn log_filter(&self) -> &str {
        match &self.scenario {
            None => self.run.target.client.log_filter(),
            Some(Scenario::Run(args)) => args.target.client.log_filter(),
            Some(Scenario::Blocked(args)) => args.target.client.log_filter(),
            Some(Scenario::Create(args)) => args.target.client.log_filter(),
            Some(Scenario::Floor(args)) => args.target.client.log_filter(),
            Some(Scenario::Llm(args)) => args.target.client.log_filter(),
            Some(Scenario::Restart(args)) => match &args.rust_log {
                Some(filter) if !filter.trim().is_empty() => filter,
                _ => "warn",
            },
        }
    }
}
