//! The `keel` command line outside the kernel itself: the command tree ([`args`]), the client
//! commands that talk to a running kernel over HTTP (`executions`, `execution`, `events`,
//! `create`, `cancel`, `signal`, `health`) and the offline `policy` commands. `main` parses
//! [`Cli`] and calls [`execute`] for everything but `dev`, `serve` and `bench`.

pub mod args;
mod breakers;
pub mod client;
mod events;
mod feed;
pub mod jsonl;
pub mod keys;
pub mod output;
pub mod runner;
mod watch;

use serde_json::{Map, Value, json};

pub use args::{Cli, Command, PolicyCommand};
pub use client::{CliError, Client, path_segment};

use crate::config::{ClientConfig, OutputFormat};

/// Largest page the kernel serves for `GET /v0/executions`.
const LIST_PAGE_MAX: usize = 200;

/// Runs a client or policy command; `dev`, `serve` and `bench` are rejected (main runs them).
pub async fn execute(command: Command) -> Result<(), CliError> {
    match command {
        Command::Policy(policy) => run_policy(policy),
        Command::Executions(args) => {
            let client = Client::new(&args.client)?;
            if args.watch {
                watch::run(&client, &args).await
            } else {
                let page = list_executions(&client, &args).await?;
                output::emit(&render_executions(&page, args.client.output));
                Ok(())
            }
        }
        Command::Completions(args) => {
            output::emit(&completions(args.shell));
            Ok(())
        }
        Command::Execution(args) => {
            let client = Client::new(&args.client)?;
            let execution = client
                .get(&format!("/v0/executions/{}", path_segment(&args.id)), &[])
                .await?;
            print_document(&execution, args.client.output, output::execution_details);
            Ok(())
        }
        Command::Events(args) => {
            let client = Client::new(&args.client)?;
            let output = args.client.output;
            match &args.id {
                Some(id) if args.tail => events::tail(&client, id, args.after, output).await,
                Some(id) => events::print_snapshot(&client, id, args.after, output).await,
                None => {
                    let feed_args = feed::FeedArgs {
                        types: &args.types,
                        agent: args.agent.as_deref(),
                        after: args.after,
                    };
                    if args.tail {
                        feed::tail(&client, &feed_args, output).await
                    } else {
                        feed::print_snapshot(&client, &feed_args, output).await
                    }
                }
            }
        }
        Command::Create(args) => {
            let client = Client::new(&args.client)?;
            let mut body = Map::new();
            body.insert("agent_id".to_owned(), Value::String(args.agent.clone()));
            if let Some(input) = &args.input {
                body.insert("input".to_owned(), parse_json("--input", input)?);
            }
            if !args.label.is_empty() {
                let labels: Map<String, Value> = args
                    .label
                    .iter()
                    .map(|(key, value)| (key.clone(), Value::String(value.clone())))
                    .collect();
                body.insert("labels".to_owned(), Value::Object(labels));
            }
            let execution = client
                .post("/v0/executions", Some(&Value::Object(body)))
                .await?;
            print_document(&execution, args.client.output, |execution| {
                format!(
                    "{}\n",
                    execution
                        .get("id")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                )
            });
            Ok(())
        }
        Command::Cancel(args) => {
            let client = Client::new(&args.client)?;
            let execution = client
                .post(
                    &format!("/v0/executions/{}/cancel", path_segment(&args.id)),
                    None,
                )
                .await?;
            print_document(&execution, args.client.output, |execution| {
                let status = execution
                    .get("status")
                    .and_then(Value::as_str)
                    .unwrap_or("cancelled");
                format!("{} {status}\n", args.id)
            });
            Ok(())
        }
        Command::Signal(args) => {
            let client = Client::new(&args.client)?;
            let mut body = json!({ "signal_type": args.signal_type });
            if let Some(payload) = &args.payload {
                body["payload"] = parse_json("--payload", payload)?;
            }
            let answer = client
                .post(
                    &format!("/v0/executions/{}/signal", path_segment(&args.id)),
                    Some(&body),
                )
                .await?;
            print_document(&answer, args.client.output, |_| {
                format!("signal {} sent to {}\n", args.signal_type, args.id)
            });
            Ok(())
        }
        Command::Health(args) => health(&args.client).await,
        Command::Breakers(args) => breakers::run(&args.client).await,
        Command::Keys(command) => keys::run(&command).await,
        Command::Runner(args) => runner::run(args).await,
        Command::Client(args) => jsonl::run(args).await,
        Command::RunnerShim(args) => runner::shim::exec(args),
        Command::Dev(_) | Command::Serve(_) | Command::Bench(_) => Err(CliError::Failed(
            "dev, serve and bench are run by main, not by the client".to_owned(),
        )),
    }
}

/// Returns the client flags of a client command, if it is one.
pub fn client_config(command: &Command) -> Option<&ClientConfig> {
    match command {
        Command::Executions(args) => Some(&args.client),
        Command::Execution(args) => Some(&args.client),
        Command::Events(args) => Some(&args.client),
        Command::Create(args) => Some(&args.client),
        Command::Cancel(args) => Some(&args.client),
        Command::Signal(args) => Some(&args.client),
        Command::Health(args) => Some(&args.client),
        Command::Breakers(args) => Some(&args.client),
        Command::Keys(command) => Some(command.client()),
        Command::Runner(args) => Some(&args.client),
        Command::Client(args) => Some(&args.client),
        Command::Dev(_)
        | Command::Serve(_)
        | Command::Policy(_)
        | Command::Bench(_)
        | Command::Completions(_)
        | Command::RunnerShim(_) => None,
    }
}

/// Returns the log filter of a command run by [`execute`]: `RUST_LOG` when set, else `warn`
/// (`info` for `keel runner`, whose connections and jobs are worth seeing).
pub fn log_filter(command: &Command) -> &str {
    match command {
        Command::Runner(args) => args.log_filter(),
        command => client_config(command).map_or("warn", ClientConfig::log_filter),
    }
}

/// `keel policy check|eval`.
fn run_policy(command: PolicyCommand) -> Result<(), CliError> {
    match command {
        PolicyCommand::Check { path } => {
            let (report, valid) = crate::policy::check_command(&path);
            output::emit(&report);
            if valid {
                Ok(())
            } else {
                Err(CliError::Failed(format!(
                    "policy {} is invalid",
                    path.display()
                )))
            }
        }
        PolicyCommand::Eval {
            path,
            agent,
            tool,
            args,
            labels,
        } => {
            let report = crate::policy::eval_command(&path, &agent, &tool, args.as_deref(), labels)
                .map_err(CliError::Failed)?;
            output::emit(report.trim_end());
            Ok(())
        }
    }
}

/// One listing of `keel executions`: the summaries and the cursor after the last one.
pub struct ExecutionsPage {
    /// Summaries, newest first.
    pub executions: Vec<Value>,
    /// Cursor of the next page (empty at the end).
    pub next_cursor: String,
}

/// `keel executions`: pages through the list until `--limit` summaries were collected.
async fn list_executions(
    client: &Client,
    args: &args::ExecutionsArgs,
) -> Result<ExecutionsPage, CliError> {
    let mut collected: Vec<Value> = Vec::new();
    let mut cursor = String::new();
    while collected.len() < args.limit {
        let page_size = (args.limit - collected.len()).min(LIST_PAGE_MAX);
        let mut query: Vec<(&str, String)> = vec![("limit", page_size.to_string())];
        if let Some(status) = &args.status {
            query.push(("status", status.clone()));
        }
        if let Some(agent) = &args.agent {
            query.push(("agent_id", agent.clone()));
        }
        for (key, value) in &args.label {
            query.push(("label", format!("{key}={value}")));
        }
        if !cursor.is_empty() {
            query.push(("cursor", cursor.clone()));
        }
        let page = client.get("/v0/executions", &query).await?;
        let executions = page
            .get("executions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        collected.extend(executions);
        cursor = page
            .get("next_cursor")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if cursor.is_empty() {
            break;
        }
    }
    collected.truncate(args.limit);
    Ok(ExecutionsPage {
        executions: collected,
        next_cursor: cursor,
    })
}

/// Renders a listing as the table or as one JSON document.
fn render_executions(page: &ExecutionsPage, format: OutputFormat) -> String {
    match format {
        OutputFormat::Text => output::executions_table(&page.executions),
        OutputFormat::Json => output::pretty(
            &json!({ "executions": page.executions, "next_cursor": page.next_cursor }),
        ),
    }
}

/// Returns the completion script of `keel` for `shell`.
pub fn completions(shell: clap_complete::Shell) -> String {
    use clap::CommandFactory as _;
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "keel", &mut script);
    String::from_utf8_lossy(&script).into_owned()
}

/// `keel health`: liveness and readiness; fails unless both are fine.
async fn health(config: &ClientConfig) -> Result<(), CliError> {
    let client = Client::new(config)?;
    let health = client.get("/v0/health", &[]).await?;
    let ready = client.get("/v0/ready", &[]).await;
    let (ready_json, ready_text, is_ready) = match &ready {
        Ok(body) => (body.clone(), "ready".to_owned(), true),
        Err(error) => (
            json!({ "error": error.to_string() }),
            format!("NOT ready: {error}"),
            false,
        ),
    };
    match config.output {
        OutputFormat::Text => {
            output::emit(&format!("{}: healthy, {ready_text}", client.base_url()))
        }
        OutputFormat::Json => output::emit(&output::pretty(
            &json!({ "url": client.base_url(), "health": health, "ready": ready_json, "ok": is_ready }),
        )),
    }
    if is_ready {
        Ok(())
    } else {
        Err(CliError::Failed("kernel is not ready".to_owned()))
    }
}

/// Prints a document as JSON or through `render`.
fn print_document(document: &Value, output: OutputFormat, render: impl FnOnce(&Value) -> String) {
    match output {
        OutputFormat::Text => output::emit(&render(document)),
        OutputFormat::Json => output::emit(&output::pretty(document)),
    }
}

/// Parses a JSON argument.
fn parse_json(what: &'static str, text: &str) -> Result<Value, CliError> {
    serde_json::from_str(text).map_err(|error| CliError::InvalidArgument {
        what,
        message: format!("not JSON: {error}"),
    })
}
