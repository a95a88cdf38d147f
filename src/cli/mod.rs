//! The `keel` command line outside the kernel itself: the command tree ([`args`]), the client
//! commands that talk to a running kernel over HTTP (`executions`, `execution`, `events`,
//! `create`, `cancel`, `signal`, `health`) and the offline `policy` commands. `main` parses
//! [`Cli`] and calls [`execute`] for everything but `dev`, `serve` and `bench`.

pub mod approvals;
pub mod args;
mod breakers;
pub mod client;
mod events;
mod executions;
mod feed;
pub mod jsonl;
pub mod keys;
pub mod llm;
pub mod output;
pub mod runner;
pub mod runners;
mod watch;

use serde_json::{Map, Value, json};

pub use args::{Cli, Command, PolicyCommand};
pub use client::{CliError, Client, path_segment};
pub use executions::ExecutionsPage;
use executions::{consumer_notice, finished, list_executions, render_executions, wait_for_end};

use crate::config::{ClientConfig, OutputFormat};

/// Exit status of `keel policy eval` when the policy denies the call.
pub const EXIT_DENIED: u8 = 3;
/// Exit status of `keel policy eval` when the call needs a human's approval.
pub const EXIT_NEEDS_APPROVAL: u8 = 4;

/// Largest page the kernel serves for `GET /v0/executions`.
const LIST_PAGE_MAX: usize = 200;

/// Runs a client or policy command; `dev`, `serve` and `bench` are rejected (main runs them).
pub async fn execute(command: Command) -> Result<(), CliError> {
    match command {
        Command::Policy(policy) => run_policy(policy),
        Command::Executions(args) => {
            let Some(verb) = args.command else {
                let list = args.list;
                let client = Client::new(&list.client)?;
                if list.watch {
                    return watch::run(&client, &list).await;
                }
                let page = list_executions(&client, &list).await?;
                output::emit(&render_executions(&page, list.client.output));
                return Ok(());
            };
            Box::pin(execute(
                Command::Executions(args::ExecutionsArgs {
                    command: Some(verb),
                    list: args.list,
                })
                .normalized(),
            ))
            .await
        }
        Command::Watch(args) => {
            let client = Client::new(&args.client)?;
            let outcome = events::follow_to_end(&client, &args.id, args.client.output).await?;
            finished(&args.id, &outcome)
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
            if let Some(priority) = args.priority {
                body.insert("priority".to_owned(), Value::from(priority));
            }
            let headers: Vec<(&str, &str)> = args
                .idempotency_key
                .as_deref()
                .map(|key| ("Idempotency-Key", key))
                .into_iter()
                .collect();
            let execution = client
                .post_with("/v0/executions", Some(&Value::Object(body)), &headers)
                .await?;
            if let Some(notice) = consumer_notice(&execution) {
                eprintln!("keel: {notice}");
            }
            if args.wait {
                let id = execution
                    .get("id")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                let waited = wait_for_end(&client, &id, args.wait_timeout).await?;
                print_document(&waited, args.client.output, output::execution_details);
                return finished(&id, &waited);
            }
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
        Command::Reconcile(args) => {
            let client = Client::new(&args.client)?;
            let answer = args.answer.replace('-', "_");
            let mut body = json!({ "answer": answer });
            if let Some(result) = &args.result {
                body["result"] = parse_json("--result", result)?;
            }
            if let Some(error) = &args.error {
                body["error"] = json!(error);
            }
            let path = format!(
                "/v0/executions/{}/steps/{}/reconcile",
                path_segment(&args.id),
                path_segment(&args.step)
            );
            let answered = client.post(&path, Some(&body)).await?;
            print_document(&answered, args.client.output, |_| {
                format!(
                    "step {} of {} reconciled: {}\n",
                    args.step, args.id, args.answer
                )
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
        Command::Llm(command) => llm::run(&command).await,
        Command::Approvals(args) => approvals::list(&args.client).await,
        Command::Approve(args) => approvals::answer(&args, true).await,
        Command::Deny(args) => approvals::answer(&args, false).await,
        Command::Runner(args) => runner::run(args).await,
        Command::Runners(command) => runners::run(&command).await,
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
        Command::Executions(args) => match &args.command {
            None => Some(&args.list.client),
            Some(args::ExecutionsCommand::List(list)) => Some(&list.client),
            Some(args::ExecutionsCommand::Get(args) | args::ExecutionsCommand::Watch(args)) => {
                Some(&args.client)
            }
            Some(args::ExecutionsCommand::Create(args)) => Some(&args.client),
            Some(args::ExecutionsCommand::Cancel(args)) => Some(&args.client),
            Some(args::ExecutionsCommand::Signal(args)) => Some(&args.client),
            Some(args::ExecutionsCommand::Reconcile(args)) => Some(&args.client),
            Some(args::ExecutionsCommand::Events(args)) => Some(&args.client),
        },
        Command::Watch(args) => Some(&args.client),
        Command::Execution(args) => Some(&args.client),
        Command::Events(args) => Some(&args.client),
        Command::Create(args) => Some(&args.client),
        Command::Cancel(args) => Some(&args.client),
        Command::Signal(args) => Some(&args.client),
        Command::Reconcile(args) => Some(&args.client),
        Command::Health(args) => Some(&args.client),
        Command::Breakers(args) => Some(&args.client),
        Command::Keys(command) => Some(command.client()),
        Command::Llm(command) => Some(command.client()),
        Command::Approvals(args) => Some(&args.client),
        Command::Approve(args) | Command::Deny(args) => Some(&args.client),
        Command::Runner(args) => Some(&args.client),
        Command::Runners(command) => Some(command.client()),
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
            output: format,
            path,
            agent,
            tool,
            args,
            labels,
        } => {
            let report = crate::policy::eval_command(&path, &agent, &tool, args.as_deref(), labels)
                .map_err(CliError::Failed)?;
            match format {
                OutputFormat::Text => output::emit(report.text.trim_end()),
                OutputFormat::Json => output::emit(&output::pretty(&report.json)),
            }
            match report.decision {
                keel_actors::policy::Decision::Allow => Ok(()),
                keel_actors::policy::Decision::Deny => Err(CliError::Exit(EXIT_DENIED)),
                keel_actors::policy::Decision::RequireApproval => {
                    Err(CliError::Exit(EXIT_NEEDS_APPROVAL))
                }
            }
        }
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
