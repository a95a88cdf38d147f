//! The command tree of the `keel` binary (clap derive): `dev`, `serve`, `policy`, the client
//! commands and `bench`. `main` parses it and dispatches; the server flags live in
//! [`crate::config`], the client flags in [`ClientConfig`].

use clap::{Args, Parser, Subcommand};

use crate::bench::BenchArgs;
use crate::config::{ClientConfig, Config};

/// Keel: an execution kernel for AI agents.
#[derive(Debug, Parser)]
#[command(
    name = "keel",
    version,
    about,
    propagate_version = true,
    max_term_width = 100
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands of `keel`.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Runs a kernel for local development: 127.0.0.1:8080, SQLite in ./.keel, every tool
    /// allowed unless --policy is given, no authentication unless --bearer-token is given.
    #[command(
        mut_arg("bind", |arg| arg.default_value("127.0.0.1")),
        mut_arg("log_format", |arg| arg.default_value("text")),
        mut_arg("production", |arg| arg.hide(true)),
    )]
    Dev(Config),
    /// Runs a production kernel (0.0.0.0:8080, JSON logs, secure-default policy without
    /// --policy); --production refuses to start without a token, a policy and a database URL.
    Serve(Config),
    /// Validates policy files or evaluates one tool call against them, without a kernel.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Executions of a running kernel: list (the default), get, create, cancel, signal, events,
    /// watch.
    Executions(ExecutionsArgs),
    /// Same as `keel executions get ID`.
    #[command(hide = true)]
    Execution(ExecutionArgs),
    /// Same as `keel executions events` (and `keel events --all`: the kernel-wide feed).
    Events(EventsArgs),
    /// Same as `keel executions create`.
    #[command(hide = true)]
    Create(CreateArgs),
    /// Same as `keel executions cancel ID`.
    #[command(hide = true)]
    Cancel(CancelArgs),
    /// Same as `keel executions signal ID`.
    #[command(hide = true)]
    Signal(SignalArgs),
    /// Same as `keel executions watch ID`.
    #[command(hide = true)]
    Watch(ExecutionArgs),
    /// Same as `keel executions reconcile ID`.
    #[command(hide = true)]
    Reconcile(ReconcileArgs),
    /// Checks that a kernel is up and its database reachable.
    Health(HealthArgs),
    /// Lists the circuit breakers that are open, half-open or counting failures.
    Breakers(HealthArgs),
    /// Manages API keys (admin): list, create, rotate, revoke (docs/security.md).
    #[command(subcommand)]
    Keys(crate::cli::keys::KeysCommand),
    /// Model calls through the LLM gateway: `keel llm export EXECUTION > cassette.json`.
    #[command(subcommand)]
    Llm(crate::cli::llm::LlmCommand),
    /// Lists the tool calls waiting for an approval.
    Approvals(HealthArgs),
    /// Approves a waiting tool call: `keel approve ID [--reason TEXT]`.
    Approve(crate::cli::approvals::AnswerArgs),
    /// Denies a waiting tool call: `keel deny ID --reason TEXT` (the agent is told why).
    Deny(crate::cli::approvals::AnswerArgs),
    /// Serves tools from the command line: runs each job in a fresh worker process
    /// (`keel runner --exec --runner-id R --tool T -- PROGRAM ARGS…`; docs/guardrails.md), or
    /// publishes an MCP server's tools (`keel runner --mcp --runner-id R -- COMMAND…`; docs/mcp.md).
    Runner(crate::cli::runner::RunnerArgs),
    /// Runners of a running kernel: show one, accept the MCP tool changes it withdrew.
    #[command(subcommand)]
    Runners(crate::cli::runners::RunnersCommand),
    /// Drives a kernel over stdio: `keel client --jsonl` reads commands as JSON lines.
    #[command(mut_arg("output", |arg| arg.default_value("json")
        .help("Output format: JSON lines, the only one (text is refused)")))]
    Client(crate::cli::jsonl::ClientArgs),
    /// Prints a shell completion script: `keel completions bash > /etc/bash_completion.d/keel`.
    Completions(CompletionsArgs),
    /// Internal: sets a worker's rlimits and executes it (started by `keel runner`).
    #[command(name = "runner-shim", hide = true)]
    RunnerShim(crate::cli::runner::shim::ShimArgs),
    /// Load generator: plays agents and runners over HTTP/SSE in a scenario (run, blocked,
    /// restart, create) and reports throughput, latency, kernel CPU and memory.
    Bench(BenchArgs),
}

/// `keel policy …`.
#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Loads a policy file or directory and reports every problem (exit 1 if any).
    Check {
        /// Policy file or directory of YAML files.
        path: std::path::PathBuf,
    },
    /// Evaluates one tool call against a policy and prints the decision. Exit status: 0
    /// allow, 3 deny, 4 require_approval, 1 when the policy does not load.
    Eval {
        /// Output format.
        #[arg(long, value_name = "FORMAT", value_enum, default_value = "text")]
        output: crate::config::OutputFormat,
        /// Policy file or directory of YAML files.
        path: std::path::PathBuf,
        /// Agent id of the call.
        #[arg(long, value_name = "AGENT")]
        agent: String,
        /// Tool id of the call.
        #[arg(long, value_name = "TOOL")]
        tool: String,
        /// Tool arguments as a JSON object [default: {}].
        #[arg(long, value_name = "JSON")]
        args: Option<String>,
        /// Execution label `key=value` (repeatable).
        #[arg(long = "label", alias = "labels", value_name = "KEY=VALUE", value_parser = parse_key_value)]
        labels: Vec<(String, String)>,
    },
}

/// `keel executions [list|get|create|cancel|signal|events|watch]` (no verb: list).
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct ExecutionsArgs {
    /// What to do (default: list).
    #[command(subcommand)]
    pub command: Option<ExecutionsCommand>,
    /// Flags of `list`, accepted without the verb.
    #[command(flatten)]
    pub list: ListArgs,
}

/// The verbs of `keel executions`.
#[derive(Debug, Subcommand)]
pub enum ExecutionsCommand {
    /// Lists executions, newest first.
    #[command(visible_alias = "ls")]
    List(ListArgs),
    /// Shows one execution (with its error when it failed or was cancelled).
    #[command(visible_alias = "show")]
    Get(ExecutionArgs),
    /// Creates an execution and prints its id (--wait: waits for it to end).
    Create(CreateArgs),
    /// Cancels an execution.
    Cancel(CancelArgs),
    /// Sends a signal to an execution.
    Signal(SignalArgs),
    /// Answers a step whose outcome is unknown (an at_most_once step that lost its runner):
    /// --answer happened (with --result), run-again or fail (with --error).
    Reconcile(ReconcileArgs),
    /// Prints the events of an execution; --tail follows them until it ends.
    Events(EventsArgs),
    /// Follows an execution's events until it ends; exits 1 unless it completed.
    Watch(ExecutionArgs),
}

/// `keel executions list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only executions in this status (pending, running, blocked, completed, failed, cancelled).
    #[arg(long, value_name = "STATUS")]
    pub status: Option<String>,
    /// Only executions of this agent.
    #[arg(long, value_name = "AGENT")]
    pub agent: Option<String>,
    /// Only executions carrying this label `key=value` (repeatable; all must match).
    #[arg(long, value_name = "KEY=VALUE", value_parser = parse_key_value)]
    pub label: Vec<(String, String)>,
    /// Most executions to list (the kernel caps a page at 200; more are fetched page by page).
    #[arg(long, value_name = "N", default_value = "50")]
    pub limit: usize,
    /// Redraw the table every --interval until interrupted (Ctrl-C), like `watch`.
    #[arg(long)]
    pub watch: bool,
    /// Time between two redraws of --watch.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = crate::config::parse_duration)]
    pub interval: std::time::Duration,
    /// Kernel connection and output flags.
    #[command(flatten)]
    pub client: ClientConfig,
}

/// `keel execution ID`.
#[derive(Debug, Args)]
pub struct ExecutionArgs {
    /// Execution id.
    pub id: String,
    /// Kernel connection and output flags.
    #[command(flatten)]
    pub client: ClientConfig,
}

/// `keel events ID`.
#[derive(Debug, Args)]
pub struct EventsArgs {
    /// Execution id (or --all).
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    pub id: Option<String>,
    /// Every execution's events, in position order (the kernel-wide feed).
    #[arg(long)]
    pub all: bool,
    /// With --all: only event types matching this pattern (`step.*`, `*.failed`; repeatable).
    #[arg(long = "type", value_name = "PATTERN", requires = "all")]
    pub types: Vec<String>,
    /// With --all: only executions of this agent.
    #[arg(long, value_name = "AGENT", requires = "all")]
    pub agent: Option<String>,
    /// Keep following new events until the execution ends (with --all: until Ctrl-C).
    #[arg(long)]
    pub tail: bool,
    /// Only events with a sequence (with --all: a position) greater than this.
    #[arg(long, value_name = "SEQUENCE", default_value = "0")]
    pub after: i64,
    /// Kernel connection and output flags.
    #[command(flatten)]
    pub client: ClientConfig,
}

/// `keel create`.
#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Agent that runs the execution.
    #[arg(long, value_name = "AGENT")]
    pub agent: String,
    /// Input as JSON.
    #[arg(long, value_name = "JSON")]
    pub input: Option<String>,
    /// Label `key=value` (repeatable).
    #[arg(long, value_name = "KEY=VALUE", value_parser = parse_key_value)]
    pub label: Vec<(String, String)>,
    /// Queue priority within the agent's pending executions (higher is offered first).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub priority: Option<i64>,
    /// Idempotency key: a repeat with the same key returns the first execution.
    #[arg(long, value_name = "KEY")]
    pub idempotency_key: Option<String>,
    /// Wait until the execution ends, print it, and exit 1 unless it completed.
    #[arg(long)]
    pub wait: bool,
    /// With --wait: give up after this long (exit 1); waits without limit by default.
    #[arg(long, value_name = "DURATION", requires = "wait", value_parser = crate::config::parse_duration)]
    pub wait_timeout: Option<std::time::Duration>,
    /// Kernel connection and output flags.
    #[command(flatten)]
    pub client: ClientConfig,
}

/// `keel cancel ID`.
#[derive(Debug, Args)]
pub struct CancelArgs {
    /// Execution id.
    pub id: String,
    /// Kernel connection and output flags.
    #[command(flatten)]
    pub client: ClientConfig,
}

/// `keel signal ID`.
#[derive(Debug, Args)]
pub struct SignalArgs {
    /// Execution id.
    pub id: String,
    /// Signal type.
    #[arg(long = "type", value_name = "TYPE")]
    pub signal_type: String,
    /// Payload as JSON.
    #[arg(long, value_name = "JSON")]
    pub payload: Option<String>,
    /// Kernel connection and output flags.
    #[command(flatten)]
    pub client: ClientConfig,
}

/// `keel executions reconcile ID --step STEP --answer ANSWER`.
#[derive(Debug, Args)]
pub struct ReconcileArgs {
    /// Execution id.
    pub id: String,
    /// Step whose outcome is unknown (`step.outcome_unknown`).
    #[arg(long, value_name = "STEP_ID")]
    pub step: String,
    /// happened (it ran), run-again (it did not) or fail.
    #[arg(long, value_parser = ["happened", "run-again", "fail"])]
    pub answer: String,
    /// The step's result as JSON, for `happened`.
    #[arg(long, value_name = "JSON")]
    pub result: Option<String>,
    /// The step's error, for `fail`.
    #[arg(long, value_name = "TEXT")]
    pub error: Option<String>,
    /// Kernel connection and output flags.
    #[command(flatten)]
    pub client: ClientConfig,
}

/// `keel completions SHELL`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// Shell to complete in.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// `keel health`.
#[derive(Debug, Args)]
pub struct HealthArgs {
    /// Kernel connection and output flags.
    #[command(flatten)]
    pub client: ClientConfig,
}

impl Command {
    /// Returns the command with `keel executions VERB` replaced by the command it names, so
    /// that each verb has one implementation whichever spelling was used.
    #[must_use]
    pub fn normalized(self) -> Self {
        let Self::Executions(args) = self else {
            return self;
        };
        match args.command {
            None => Self::Executions(args),
            Some(ExecutionsCommand::List(list)) => Self::Executions(ExecutionsArgs {
                command: None,
                list,
            }),
            Some(ExecutionsCommand::Get(get)) => Self::Execution(get),
            Some(ExecutionsCommand::Create(create)) => Self::Create(create),
            Some(ExecutionsCommand::Cancel(cancel)) => Self::Cancel(cancel),
            Some(ExecutionsCommand::Signal(signal)) => Self::Signal(signal),
            Some(ExecutionsCommand::Reconcile(reconcile)) => Self::Reconcile(reconcile),
            Some(ExecutionsCommand::Events(events)) => Self::Events(events),
            Some(ExecutionsCommand::Watch(watch)) => Self::Watch(watch),
        }
    }
}

/// Parses `key=value` (split at the first `=`; the key must not be empty).
pub fn parse_key_value(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ if text.contains(':') => Err(format!(
            "expected KEY=VALUE, got {text:?}: labels are written key=value here"
        )),
        _ => Err(format!("expected KEY=VALUE, got {text:?}")),
    }
}
