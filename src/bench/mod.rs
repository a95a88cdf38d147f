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
//! - `floor`: the HTTP round trip, the kernel's CPU per request and a write + `fsync` on
//!   the data disk, and from them the least an execution of K steps can take ([`floor`]).
//!
//! Every scenario reports throughput, latency percentiles, the kernel's CPU per execution and
//! memory (with `--pid`), the bench's own CPU per execution and the errors; `--output json`
//! prints one JSON object per scenario on one line ([`report`]).

mod agent;
mod args;
mod blocked;
mod conn;
mod create;
mod embedded;
mod fanout;
mod floor;
mod http;
mod kernel_process;
mod latency;
mod llm;
mod local;
mod mixed;
mod parker;
mod procfs;
mod progress;
mod report;
mod restart;
mod resume;
mod runner;
mod wire;

use crate::cli::CliError;
use crate::config::{ClientConfig, OutputFormat};
pub use args::{
    BenchArgs, BlockedArgs, CreateArgs, FloorArgs, LlmArgs, RestartArgs, RunArgs, Scenario,
    TargetArgs,
};
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

/// Runs the chosen scenario and prints its report; fails when a request failed or nothing
/// was done.
pub async fn run(args: BenchArgs) -> Result<(), CliError> {
    match args.scenario {
        None => run_scenario(args.run).await,
        Some(Scenario::Run(run)) => run_scenario(run).await,
        Some(Scenario::Blocked(args)) => blocked::run(args).await,
        Some(Scenario::Create(args)) => create::run(args).await,
        Some(Scenario::Restart(args)) => restart::run(args).await,
        Some(Scenario::Floor(args)) => floor::run(args).await,
        Some(Scenario::Llm(args)) => llm::run(args).await,
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
    /// Client of the kernel (the first one of several).
    pub http: http::Http,
    /// Process whose CPU and memory are reported (the first one of several).
    pub pid: Option<u32>,
    /// Clients of every kernel named by `--url` (a comma list), the first one first.
    pub kernels: Vec<http::Http>,
    /// Every process id of `--pid`.
    pub pids: Vec<u32>,
    /// The kernel started in this process, if any.
    pub embedded: Option<EmbeddedKernel>,
    /// Output format.
    pub output: OutputFormat,
}

impl Target {
    /// Starts the embedded kernel when asked and checks the kernel answers; one kernel only.
    pub async fn connect(args: &TargetArgs) -> Result<Self, CliError> {
        let target = Self::connect_many(args).await?;
        if target.kernels.len() > 1 {
            return Err(invalid(
                "--url",
                "several kernels (a comma list) are measured by `run --local-steps` only",
            ));
        }
        if target.pids.len() > 1 {
            return Err(invalid(
                "--pid",
                "several process ids are read by `run --local-steps` only",
            ));
        }
        Ok(target)
    }

    /// As [`Target::connect`], with `--url` a comma list of kernels (each must answer) and
    /// `--pid` one id per kernel, or none.
    pub async fn connect_many(args: &TargetArgs) -> Result<Self, CliError> {
        let urls: Vec<&str> = args
            .client
            .url()
            .split(',')
            .map(str::trim)
            .filter(|url| !url.is_empty())
            .collect();
        if urls.len() > 1 && args.embedded {
            return Err(invalid("--embedded", "takes no --url list"));
        }
        if urls.len() > 1 && !args.pid.is_empty() && args.pid.len() != urls.len() {
            return Err(invalid("--pid", "needs one process id per --url kernel"));
        }
        let mut target = Self::connect_one(args, urls.first().copied()).await?;
        for url in urls.iter().skip(1) {
            let other = Self::connect_one(args, Some(url)).await?;
            target.kernels.push(other.http);
        }
        Ok(target)
    }

    /// Connects to `url` (or the embedded kernel).
    async fn connect_one(args: &TargetArgs, url: Option<&str>) -> Result<Self, CliError> {
        let embedded = if args.embedded {
            Some(EmbeddedKernel::start().await?)
        } else {
            None
        };
        let (url, token) = match &embedded {
            Some(kernel) => (kernel.url.clone(), None),
            None => (
                url.unwrap_or_else(|| args.client.url()).to_owned(),
                args.client.token().map(str::to_owned),
            ),
        };
        // Validates the URL the way the client commands do.
        crate::cli::Client::new(&ClientConfig {
            url: Some(url.clone()),
            token: token.clone(),
            rebuno_url: None,
            rebuno_api_key: None,
            ..args.client.clone()
        })?;
        let http = http::Http::new(&url, token.as_deref())?;
        if !http.ok("/v0/health").await {
            return Err(CliError::Failed(format!(
                "the kernel at {url} does not answer /v0/health"
            )));
        }
        let pids = match &embedded {
            Some(_) if args.pid.is_empty() => vec![std::process::id()],
            _ => args.pid.clone(),
        };
        Ok(Self {
            kernels: vec![http.clone()],
            http,
            pid: pids.first().copied(),
            pids,
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
    use std::path::PathBuf;
    use std::time::Duration;

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
        assert_eq!(args.run.target.pid, [42]);
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
    fn several_pids_as_a_list_or_repeated() {
        let args = bench(&[
            "run",
            "--pid",
            "1,2",
            "--pid",
            "3",
            "--url",
            "http://a,http://b",
        ]);
        match args.scenario {
            Some(Scenario::Run(run)) => {
                assert_eq!(run.target.pid, [1, 2, 3]);
                assert_eq!(run.target.client.url(), "http://a,http://b");
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
