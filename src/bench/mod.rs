//! `keel bench`: a load generator that plays agent consumers and runners over real HTTP/SSE
//! against a kernel and measures it. Scenarios:
//!
//! - `run` (also `keel bench` without a scenario): closed-loop executions. By default each makes
//!   `--tools-per-execution` tool calls alternating local and remote with `--concurrency` in
//!   flight over `--agents` consumers ([`mixed`]); with `--local-steps K` each of
//!   `--concurrency` agents runs one execution at a time, K local steps then `complete`
//!   ([`local`]).
//! - `blocked`: parks N executions on a signal, reports the kernel's memory per parked
//!   execution, then resumes them all ([`blocked`]).
//! - `restart`: starts a kernel, leaves N executions pending or blocked, `kill -9`s it,
//!   restarts it and times readiness and a first new execution ([`restart`]).
//! - `create`: creations only, no agent connected ([`create`]).
//!
//! Every scenario reports throughput, latency percentiles, the kernel's CPU per execution and
//! memory (with `--pid`), the bench's own CPU per execution and the errors; `--output json`
//! prints one JSON object per scenario on one line ([`report`]).

mod agent;
mod blocked;
mod create;
mod embedded;
mod fanout;
mod http;
mod kernel_process;
mod latency;
mod local;
mod mixed;
mod parker;
mod procfs;
mod progress;
mod report;
mod restart;
mod runner;

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};

use crate::cli::CliError;
use crate::config::{ClientConfig, OutputFormat, parse_duration};
pub use embedded::EmbeddedKernel;
pub use latency::{Latency, LatencySummary};
pub use procfs::{CpuUsage, Memory, read_memory};
pub use report::{Report, Stats};

/// Tool the agents run themselves.
pub const LOCAL_TOOL: &str = "bench.local";
/// Tool the runners run.
pub const REMOTE_TOOL: &str = "bench.remote";
/// Signal the `blocked` and `restart` scenarios park executions on.
pub const RESUME_SIGNAL: &str = "bench.resume";

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
}

/// The kernel under test, for the scenarios that use a running one.
#[derive(Clone, Debug, Args)]
pub struct TargetArgs {
    /// Kernel process id whose CPU time (/proc/PID/stat) and memory (VmRSS/VmHWM of
    /// /proc/PID/status) are reported.
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
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
            Some(Scenario::Restart(args)) => match &args.rust_log {
                Some(filter) if !filter.trim().is_empty() => filter,
                _ => "warn",
            },
        }
    }
}

/// Runs the chosen scenario and prints its report; fails when a request failed or nothing
/// was done.
pub async fn run(args: BenchArgs) -> Result<(), CliError> {
    match args.scenario {
        None => run_scenario(args.run).await,
        Some(Scenario::Run(run)) => run_scenario(run).await,
        Some(Scenario::Blocked(args)) => blocked::run(args).await,
        Some(Scenario::Create(args)) => create::run(args).await,
        Some(Scenario::Restart(args)) => restart::run(args).await,
    }
}

/// `run`: the local-steps closed loop or the mixed one.
async fn run_scenario(args: RunArgs) -> Result<(), CliError> {
    if args.local_steps.is_some() {
        local::run(args).await
    } else {
        mixed::run(args).await
    }
}

/// A kernel to measure: the one at `--url`, or one started in this process.
pub(crate) struct Target {
    /// Client of the kernel.
    pub http: http::Http,
    /// Process whose CPU and memory are reported.
    pub pid: Option<u32>,
    /// The kernel started in this process, if any.
    pub embedded: Option<EmbeddedKernel>,
    /// Output format.
    pub output: OutputFormat,
}

impl Target {
    /// Starts the embedded kernel when asked and checks the kernel answers.
    pub async fn connect(args: &TargetArgs) -> Result<Self, CliError> {
        let embedded = if args.embedded {
            Some(EmbeddedKernel::start().await?)
        } else {
            None
        };
        let (url, token) = match &embedded {
            Some(kernel) => (kernel.url.clone(), None),
            None => (args.client.url.trim().to_owned(), args.client.token.clone()),
        };
        // Validates the URL the way the client commands do.
        crate::cli::Client::new(&ClientConfig {
            url: url.clone(),
            token: token.clone(),
            ..args.client.clone()
        })?;
        let http = http::Http::new(&url, token.as_deref())?;
        if !http.ok("/v0/health").await {
            return Err(CliError::Failed(format!(
                "the kernel at {url} does not answer /v0/health"
            )));
        }
        let pid = args
            .pid
            .or_else(|| embedded.as_ref().map(|_| std::process::id()));
        Ok(Self {
            http,
            pid,
            embedded,
            output: args.client.output,
        })
    }

    /// Stops the embedded kernel, if any.
    pub async fn finish(self) -> Result<(), CliError> {
        match self.embedded {
            Some(kernel) => kernel.stop().await,
            None => Ok(()),
        }
    }
}

/// Prints a report as text or as one JSON line.
pub(crate) fn emit(report: &Report, output: OutputFormat) {
    match output {
        OutputFormat::Text => crate::cli::output::emit(report.to_text().trim_end()),
        OutputFormat::Json => crate::cli::output::emit(&report.to_json().to_string()),
    }
}

/// Fails when requests failed or nothing was done.
pub(crate) fn verdict(errors: u64, done: u64, what: &str) -> Result<(), CliError> {
    if errors > 0 {
        return Err(CliError::Failed(format!(
            "{errors} request(s) failed during the bench"
        )));
    }
    if done == 0 {
        return Err(CliError::Failed(format!("no {what}")));
    }
    Ok(())
}

/// Returns `bench-<8 random hex>`.
pub(crate) fn bench_id() -> String {
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    format!("bench-{}", &suffix[..8])
}

/// An invalid-argument error.
pub(crate) fn invalid(what: &'static str, message: &str) -> CliError {
    CliError::InvalidArgument {
        what,
        message: message.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;
    use crate::cli::{Cli, Command};

    fn bench(args: &[&str]) -> BenchArgs {
        let parsed = Cli::try_parse_from(["keel", "bench"].iter().chain(args));
        match parsed.map(|cli| cli.command) {
            Ok(Command::Bench(bench)) => bench,
            other => panic!("not a bench command: {other:?}"),
        }
    }

    #[test]
    fn flags_without_a_scenario_are_the_run_scenario() {
        let args = bench(&["--executions", "5", "--runners", "1", "--pid", "42"]);
        assert!(args.scenario.is_none());
        assert_eq!(args.run.executions, 5);
        assert_eq!(args.run.runners, 1);
        assert_eq!(args.run.target.pid, Some(42));
        assert_eq!(args.run.local_steps, None);
    }

    #[test]
    fn scenarios_parse_their_own_flags() {
        match bench(&[
            "run",
            "--local-steps",
            "5",
            "--concurrency",
            "64",
            "--warmup",
            "2s",
        ])
        .scenario
        {
            Some(Scenario::Run(run)) => {
                assert_eq!(run.local_steps, Some(5));
                assert_eq!(run.concurrency, 64);
                assert_eq!(run.warmup, Duration::from_secs(2));
            }
            other => panic!("{other:?}"),
        }
        match bench(&["blocked", "--executions", "100000", "--output", "json"]).scenario {
            Some(Scenario::Blocked(blocked)) => {
                assert_eq!(blocked.executions, 100_000);
                assert_eq!(blocked.target.client.output, OutputFormat::Json);
            }
            other => panic!("{other:?}"),
        }
        match bench(&[
            "restart",
            "--kernel-bin",
            "/bin/keel",
            "--verify-sample",
            "0",
        ])
        .scenario
        {
            Some(Scenario::Restart(restart)) => {
                assert_eq!(restart.kernel_bin, Some(PathBuf::from("/bin/keel")));
                assert_eq!(restart.verify_sample, 0);
            }
            other => panic!("{other:?}"),
        }
        match bench(&["create", "--concurrency", "8", "--duration", "3s"]).scenario {
            Some(Scenario::Create(create)) => {
                assert_eq!(create.concurrency, 8);
                assert_eq!(create.duration, Duration::from_secs(3));
                assert_eq!(create.executions, None);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn run_flags_before_a_scenario_are_refused() {
        let parsed = Cli::try_parse_from(["keel", "bench", "--executions", "5", "blocked"]);
        assert!(parsed.is_err());
    }
}
