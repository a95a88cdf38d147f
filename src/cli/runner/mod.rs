//! `keel runner --exec`: a runner built into the binary. It connects to a kernel like an SDK
//! runner ([`connection`]) and runs each job in a fresh worker process ([`child`]): the job is
//! one JSON line on the worker's stdin, the result one JSON line on its stdout
//! ([`protocol`]). Workers are bounded in wall time, output, CPU and memory ([`shim`]), run in
//! a working directory with only the allowed environment, and are killed with their whole
//! process group when the job's deadline passes or the kernel cancels the job. `--parallel N`
//! opens N connections and runs up to N workers at once. SIGTERM or Ctrl-C stops taking jobs,
//! lets running workers finish within `--shutdown-timeout`, then kills the rest (their jobs
//! fail as retryable); a second signal kills them at once.

mod capture;
mod child;
#[cfg(test)]
mod child_tests;
mod connection;
mod mcp;
mod progress;
pub mod protocol;
#[cfg(test)]
mod protocol_tests;
pub mod shim;
mod tool_changes;

use std::collections::HashSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Args;
use serde_json::{Value, json};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use self::child::WorkerSpec;
use self::connection::{Backend, InFlight, Shared};
use self::mcp::{McpServer, ServerSpec};
use self::shim::Rlimits;
use super::args::parse_key_value;
use super::{CliError, Client};
use crate::config::{ClientConfig, parse_byte_size, parse_duration};

/// Time allowed, after the workers were killed, for their results to be posted.
const FINAL_POST_TIMEOUT: Duration = Duration::from_secs(15);

/// Flags of `keel runner`.
#[derive(Debug, Args)]
pub struct RunnerArgs {
    /// Run every job in a fresh worker process: the command after `--` (the only mode, so the
    /// flag may be left out).
    #[arg(long)]
    pub exec: bool,
    /// Serve the tools of an MCP server: the command after `--` is started once and speaks MCP
    /// on its stdio; its tools are published as `<tool-prefix><name>` and each job is a
    /// `tools/call` (docs/mcp.md).
    #[arg(long, conflicts_with = "exec")]
    pub mcp: bool,
    /// With --mcp: prefix of the published tool ids (`fs.` publishes `read_file` as
    /// `fs.read_file`).
    #[arg(long, value_name = "PREFIX", default_value = "", requires = "mcp")]
    pub tool_prefix: String,
    /// With --mcp: JSON file keeping the digests of the tool definitions across runs (written
    /// when tools are first pinned or a change is accepted) [default: pins kept in memory].
    #[arg(long, value_name = "FILE", requires = "mcp")]
    pub pin_file: Option<PathBuf>,
    /// With --mcp: accept changed or new tool definitions (pin them as listed) instead of
    /// withdrawing them.
    #[arg(long, requires = "mcp")]
    pub accept_tool_changes: bool,
    /// With --mcp: reach the MCP server over Streamable HTTP at this URL instead of starting
    /// a command (docs/mcp.md).
    #[arg(long, value_name = "URL", requires = "mcp")]
    pub mcp_url: Option<String>,
    /// With --mcp-url: send header NAME with FILE's contents (one trailing newline removed) on
    /// every request, e.g. `Authorization=token.txt` (repeatable; values are never logged).
    #[arg(long = "mcp-header-file", value_name = "NAME=FILE", value_parser = parse_key_value, requires = "mcp_url")]
    pub mcp_header_files: Vec<(String, String)>,
    /// Runner id (tools are published under it).
    #[arg(long, value_name = "ID")]
    pub runner_id: String,
    // Help text for `--help`: its <placeholders> are not HTML.
    #[allow(rustdoc::invalid_html_tags)]
    /// Consumer id of the connection [default: <runner-id>-<8 hex>]; with --parallel N the
    /// connections are <consumer-id>-0 … <consumer-id>-(N-1).
    #[arg(long, value_name = "ID")]
    pub consumer_id: Option<String>,
    /// Tool id served (repeatable; the worker reads `tool_id` from its job line). With --mcp:
    /// an MCP tool name to publish (repeatable) [default: all the server lists].
    #[arg(long = "tool", value_name = "TOOL", required_unless_present = "mcp")]
    pub tools: Vec<String>,
    /// Description published with every tool [default: names the command].
    #[arg(long, value_name = "TEXT")]
    pub description: Option<String>,
    /// JSON Schema file of a tool's arguments, `TOOL=FILE` [default: any object].
    #[arg(long = "tool-schema", value_name = "TOOL=FILE", value_parser = parse_key_value, conflicts_with = "mcp")]
    pub tool_schemas: Vec<(String, String)>,
    /// Jobs run at once (one connection each).
    #[arg(long, value_name = "N", default_value = "1", value_parser = clap::value_parser!(u16).range(1..=256))]
    pub parallel: u16,
    /// Wall-time limit of a worker; the job's own deadline applies too, whichever is first.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub timeout: Option<Duration>,
    /// Time between SIGTERM and SIGKILL when a worker is killed.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub kill_grace: Duration,
    /// Most bytes a worker may write on stdout; more fails the job and kills the worker. With
    /// --mcp: most bytes of a mapped result; more is cut with a truncation marker.
    #[arg(long, value_name = "BYTES", default_value = "1MiB", value_parser = parse_byte_size)]
    pub max_output: usize,
    /// Bytes of a worker's stderr kept for the failure message.
    #[arg(long, value_name = "BYTES", default_value = "4KiB", value_parser = parse_byte_size)]
    pub stderr_tail: usize,
    /// CPU seconds a worker may use (RLIMIT_CPU; SIGXCPU, then SIGKILL a second later).
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    pub cpu_seconds: Option<u64>,
    /// Address space a worker may map (RLIMIT_AS; allocations beyond it fail).
    #[arg(long, value_name = "BYTES", value_parser = parse_byte_size)]
    pub memory: Option<usize>,
    /// Working directory of the workers [default: the runner's].
    #[arg(long, value_name = "DIR")]
    pub workdir: Option<PathBuf>,
    /// Environment variable passed on to workers (repeatable); all others are cleared.
    #[arg(long = "env-allow", value_name = "NAME")]
    pub env_allow: Vec<String>,
    /// Environment variable set for workers (or the MCP server) from a file's contents, one
    /// trailing newline removed: `NAME=FILE` (repeatable). For secrets: the value is never
    /// logged or published.
    #[arg(long = "env-file", value_name = "NAME=FILE", value_parser = parse_key_value)]
    pub env_files: Vec<(String, String)>,
    /// Report worker failures (crash, no or bad result line, kill) as retryable, so the
    /// kernel runs the step again while attempts are left. A result line decides for itself.
    #[arg(long)]
    pub worker_failures_retryable: bool,
    /// On SIGTERM/Ctrl-C, how long running workers may still finish before they are killed.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub shutdown_timeout: Duration,
    /// Kernel connection flags.
    #[command(flatten)]
    pub client: ClientConfig,
    /// The worker: program and arguments, after `--`.
    #[arg(
        last = true,
        required_unless_present = "mcp_url",
        value_name = "PROGRAM"
    )]
    pub command: Vec<OsString>,
}

impl RunnerArgs {
    /// Log filter: `RUST_LOG` when set, else `info` (connections and jobs are worth seeing).
    pub fn log_filter(&self) -> &str {
        match &self.client.rust_log {
            Some(filter) if !filter.trim().is_empty() => filter,
            _ => "info",
        }
    }
}

/// Runs the runner until SIGTERM or Ctrl-C.
pub async fn run(args: RunnerArgs) -> Result<(), CliError> {
    let shared = Arc::new(prepare(&args).await?);
    let base = args.consumer_id.clone().unwrap_or_else(|| {
        let hex = uuid::Uuid::new_v4().simple().to_string();
        format!("{}-{}", args.runner_id, &hex[..8])
    });
    let mut connections = Vec::new();
    for index in 0..args.parallel {
        let consumer_id = if args.parallel == 1 {
            base.clone()
        } else {
            format!("{base}-{index}")
        };
        connections.push(tokio::spawn(connection::serve(shared.clone(), consumer_id)));
    }
    let mut watchers = Vec::new();
    if let Backend::Mcp(server) = &shared.backend {
        watchers.push(tokio::spawn(server.clone().watch_list_changes()));
        watchers.push(tokio::spawn(republish(shared.clone(), server.clone())));
        watchers.push(tokio::spawn(tool_changes::report(
            shared.clone(),
            server.clone(),
        )));
    }
    let mut published: Vec<&String> = shared.tools.iter().collect();
    published.sort_unstable();
    tracing::info!(
        runner_id = args.runner_id,
        tools = ?published,
        parallel = args.parallel,
        "keel runner started"
    );
    let (mut terminate, mut interrupt) = match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(terminate), Ok(interrupt)) => (terminate, interrupt),
        (Err(error), _) | (_, Err(error)) => {
            return Err(CliError::Failed(format!(
                "cannot install signal handlers: {error}"
            )));
        }
    };
    let first = next_signal(&mut terminate, &mut interrupt).await;
    tracing::info!(
        signal = first,
        jobs = shared.in_flight.count(),
        "stopping: no new jobs; running workers may finish (a second signal kills them)"
    );
    shared.stop.cancel();
    tokio::select! {
        () = shared.in_flight.wait_idle() => {}
        () = tokio::time::sleep(args.shutdown_timeout) => {
            tracing::warn!(jobs = shared.in_flight.count(), "shutdown timeout: killing the workers still running");
        }
        second = next_signal(&mut terminate, &mut interrupt) => {
            tracing::warn!(signal = second, jobs = shared.in_flight.count(), "killing the workers still running");
        }
    }
    shared.kill.cancel();
    let posted = tokio::time::timeout(
        args.kill_grace + FINAL_POST_TIMEOUT,
        shared.in_flight.wait_idle(),
    );
    if posted.await.is_err() {
        tracing::warn!(
            jobs = shared.in_flight.count(),
            "results of killed workers could not all be posted"
        );
    }
    for connection in connections {
        connection.abort();
    }
    for watcher in watchers {
        watcher.abort();
    }
    if let Backend::Mcp(server) = &shared.backend {
        server.shutdown().await;
    }
    Ok(())
}

/// Publishes an MCP server's tools again whenever they change (a definition withdrawn or
/// accepted).
async fn republish(shared: Arc<Shared>, server: Arc<McpServer>) {
    let path = format!(
        "/v0/runners/{}/tools",
        super::path_segment(&shared.runner_id)
    );
    // What every connect publishes until the tools change.
    let mut last = shared.tools_body.clone();
    loop {
        server.republish.notified().await;
        let body = server.tools_body();
        if body == last {
            continue;
        }
        last = body.clone();
        match shared.client.post(&path, Some(&body)).await {
            Ok(_) => {
                tracing::info!(tools = ?server.published().iter().map(|tool| tool.id.clone()).collect::<Vec<_>>(), "MCP tools published again")
            }
            Err(error) => tracing::warn!(%error, "cannot publish the changed MCP tools"),
        }
    }
}

/// Resolves on the next SIGTERM or SIGINT.
async fn next_signal(terminate: &mut Signal, interrupt: &mut Signal) -> &'static str {
    tokio::select! {
        _ = terminate.recv() => "SIGTERM",
        _ = interrupt.recv() => "SIGINT",
    }
}

/// Checks the flags and builds the shared state (with --mcp, starts the server and lists its
/// tools).
async fn prepare(args: &RunnerArgs) -> Result<Shared, CliError> {
    let client = Client::new(&args.client)?;
    let invalid = |what, message: String| CliError::InvalidArgument { what, message };
    if args.runner_id.trim().is_empty() {
        return Err(invalid("--runner-id", "must not be empty".to_owned()));
    }
    if args.mcp_url.is_some() && !args.command.is_empty() {
        return Err(invalid(
            "--mcp-url",
            "give either --mcp-url or a command after `--`, not both".to_owned(),
        ));
    }
    let (program, program_args) = match (&args.mcp_url, args.command.split_first()) {
        (Some(_), _) => (PathBuf::new(), &[][..]),
        (None, Some((program, program_args))) => (
            resolve_program(Path::new(program)).map_err(|message| invalid("command", message))?,
            program_args,
        ),
        (None, None) => return Err(invalid("command", "give the worker after `--`".to_owned())),
    };
    if let Some(dir) = &args.workdir
        && !dir.is_dir()
    {
        return Err(invalid(
            "--workdir",
            format!("{} is not a directory", dir.display()),
        ));
    }
    let mut env = Vec::new();
    for name in &args.env_allow {
        if name.is_empty() || name.contains('=') {
            return Err(invalid(
                "--env-allow",
                format!("{name:?} is not a variable name"),
            ));
        }
        if let Some(value) = std::env::var_os(name) {
            env.push((OsString::from(name), value));
        }
    }
    for (name, file) in &args.env_files {
        if name.is_empty() || name.contains('=') {
            return Err(invalid(
                "--env-file",
                format!("{name:?} is not a variable name"),
            ));
        }
        let text = std::fs::read_to_string(file)
            .map_err(|error| invalid("--env-file", format!("cannot read {file}: {error}")))?;
        let value = text.strip_suffix('\n').unwrap_or(&text);
        let value = value.strip_suffix('\r').unwrap_or(value);
        env.retain(|(existing, _)| existing != name.as_str());
        env.push((OsString::from(name), OsString::from(value)));
    }
    if args.mcp {
        if args.cpu_seconds.is_some() || args.memory.is_some() {
            return Err(invalid(
                "--mcp",
                "--cpu-seconds and --memory apply to --exec workers only".to_owned(),
            ));
        }
        let http = match &args.mcp_url {
            Some(url) => {
                let mut headers = Vec::new();
                for (name, file) in &args.mcp_header_files {
                    let text = std::fs::read_to_string(file).map_err(|error| {
                        invalid("--mcp-header-file", format!("cannot read {file}: {error}"))
                    })?;
                    let value = text.strip_suffix('\n').unwrap_or(&text);
                    let value = value.strip_suffix('\r').unwrap_or(value);
                    headers.push((name.clone(), value.to_owned()));
                }
                Some(
                    mcp::http::HttpTarget::new(url, headers)
                        .map_err(|message| invalid("--mcp-url", message))?,
                )
            }
            None => None,
        };
        let spec = ServerSpec {
            http,
            program,
            args: program_args.to_vec(),
            workdir: args.workdir.clone(),
            env,
            kill_grace: args.kill_grace,
            max_output: args.max_output,
            prefix: args.tool_prefix.clone(),
            only: args.tools.clone(),
            accept_tool_changes: args.accept_tool_changes,
            pin_file: args.pin_file.clone(),
        };
        let server = McpServer::start(spec)
            .await
            .map_err(|error| CliError::Failed(error.to_string()))?;
        let published = server.published();
        if published.is_empty() {
            server.shutdown().await;
            return Err(CliError::Failed(
                "the MCP server lists no tool to publish".to_owned(),
            ));
        }
        let tools = published.iter().map(|tool| tool.id.clone()).collect();
        return Ok(shared(
            args,
            client,
            mcp::tools_body(&published),
            tools,
            Backend::Mcp(Arc::new(server)),
        ));
    }
    let tools: HashSet<String> = args.tools.iter().cloned().collect();
    if tools
        .iter()
        .any(|tool| tool.trim().is_empty() || tool.contains(','))
    {
        return Err(invalid(
            "--tool",
            "tool ids must be non-empty and contain no comma".to_owned(),
        ));
    }
    let tools_body = tools_body(args, &program)?;
    let keel_exe = std::env::current_exe()
        .map_err(|error| CliError::Failed(format!("cannot find the keel binary: {error}")))?;
    let worker = WorkerSpec {
        program,
        args: program_args.to_vec(),
        workdir: args.workdir.clone(),
        env,
        rlimits: Rlimits {
            cpu_seconds: args.cpu_seconds,
            memory: args.memory.map(|bytes| bytes as u64),
        },
        keel_exe,
        max_output: args.max_output,
        stderr_tail: args.stderr_tail,
        kill_grace: args.kill_grace,
    };
    Ok(shared(
        args,
        client,
        tools_body,
        tools,
        Backend::Exec(worker),
    ))
}

/// The shared state of the connections.
fn shared(
    args: &RunnerArgs,
    client: Client,
    tools_body: Value,
    tools: HashSet<String>,
    backend: Backend,
) -> Shared {
    Shared {
        client,
        runner_id: args.runner_id.clone(),
        tools_body,
        tools,
        backend,
        timeout: args.timeout,
        worker_failures_retryable: args.worker_failures_retryable,
        slots: Semaphore::new(usize::from(args.parallel)),
        jobs: Mutex::new(Default::default()),
        stop: CancellationToken::new(),
        kill: CancellationToken::new(),
        in_flight: InFlight::default(),
    }
}

/// The schemas published before every connect.
fn tools_body(args: &RunnerArgs, program: &Path) -> Result<Value, CliError> {
    let description = args
        .description
        .clone()
        .unwrap_or_else(|| format!("keel runner --exec: {}", program.display()));
    let mut schemas = std::collections::HashMap::new();
    for (tool, file) in &args.tool_schemas {
        if !args.tools.contains(tool) {
            return Err(CliError::InvalidArgument {
                what: "--tool-schema",
                message: format!("{tool:?} is not one of the --tool ids"),
            });
        }
        let text = std::fs::read_to_string(file).map_err(|error| CliError::InvalidArgument {
            what: "--tool-schema",
            message: format!("cannot read {file}: {error}"),
        })?;
        let schema: Value = serde_json::from_str(&text)
            .ok()
            .filter(Value::is_object)
            .ok_or_else(|| CliError::InvalidArgument {
                what: "--tool-schema",
                message: format!("{file} is not a JSON object"),
            })?;
        schemas.insert(tool.clone(), schema);
    }
    let mut seen = HashSet::new();
    let tools: Vec<Value> = args
        .tools
        .iter()
        .filter(|tool| seen.insert(tool.as_str()))
        .map(|tool| {
            let schema = schemas
                .get(tool)
                .cloned()
                .unwrap_or_else(|| json!({ "type": "object", "properties": {} }));
            json!({ "id": tool, "description": description, "input_schema": schema })
        })
        .collect();
    Ok(json!({ "tools": tools }))
}

/// Makes the program path absolute: a path with a `/` against the current directory (the
/// workers may run elsewhere), a bare name through `PATH`.
fn resolve_program(program: &Path) -> Result<PathBuf, String> {
    let found = if program.components().count() > 1 || program.is_absolute() {
        std::path::absolute(program)
            .ok()
            .filter(|path| path.is_file())
    } else {
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join(program))
                .find(|candidate| candidate.is_file())
        })
    };
    found.ok_or_else(|| format!("{} is not a file (nor found on PATH)", program.display()))
}
