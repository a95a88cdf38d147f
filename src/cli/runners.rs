//! `keel runners show ID` and `keel runners accept-changes ID [--tool T]…`: an operator's view of
//! a runner (`GET /v0/runners/{id}`) and the acceptance of the MCP tool-definition changes it
//! withdrew (`POST /v0/runners/{id}/tool-changes/accept`, docs/mcp.md "Pinning"). The runner
//! takes an acceptance up within a few seconds and publishes the tools again.

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::client::Client;
use super::output;
use super::{CliError, path_segment};
use crate::config::{ClientConfig, OutputFormat};

/// `keel runners …`.
#[derive(Debug, Subcommand)]
pub enum RunnersCommand {
    /// Shows a runner: its connections, published tools and pending MCP tool changes.
    Show(ShowArgs),
    /// Accepts the MCP tool-definition changes a runner withdrew (all, or those of --tool).
    AcceptChanges(AcceptArgs),
}

impl RunnersCommand {
    /// The kernel connection flags.
    pub fn client(&self) -> &ClientConfig {
        match self {
            Self::Show(args) => &args.client,
            Self::AcceptChanges(args) => &args.client,
        }
    }
}

/// `keel runners show ID`.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// Runner id.
    pub id: String,
    /// Kernel connection and output flags.
    #[command(flatten)]
    pub client: ClientConfig,
}

/// `keel runners accept-changes ID`.
#[derive(Debug, Args)]
pub struct AcceptArgs {
    /// Runner id.
    pub id: String,
    /// Tool id whose change to accept (repeatable) [default: every pending change].
    #[arg(long = "tool", value_name = "TOOL")]
    pub tools: Vec<String>,
    /// Kernel connection and output flags.
    #[command(flatten)]
    pub client: ClientConfig,
}

/// Runs a `keel runners` verb.
pub async fn run(command: &RunnersCommand) -> Result<(), CliError> {
    let client = Client::new(command.client())?;
    let output_format = command.client().output;
    match command {
        RunnersCommand::Show(args) => {
            let runner = client
                .get(&format!("/v0/runners/{}", path_segment(&args.id)), &[])
                .await?;
            emit(output_format, &runner, || show_text(&runner));
        }
        RunnersCommand::AcceptChanges(args) => {
            let body = json!({ "tools": args.tools });
            let path = format!("/v0/runners/{}/tool-changes/accept", path_segment(&args.id));
            let answer = client.post(&path, Some(&body)).await?;
            emit(output_format, &answer, || {
                let changes = list(&answer, "accepted");
                let mut text = format!(
                    "accepted {} change(s) of runner {}:\n",
                    changes.len(),
                    args.id
                );
                text.push_str(&change_lines(&changes));
                text
            });
        }
    }
    Ok(())
}

fn emit(format: OutputFormat, value: &Value, text: impl FnOnce() -> String) {
    match format {
        OutputFormat::Json => output::emit(&output::pretty(value)),
        OutputFormat::Text => output::emit(&text()),
    }
}

fn list(value: &Value, key: &str) -> Vec<Value> {
    value
        .get(key)
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn change_lines(changes: &[Value]) -> String {
    changes
        .iter()
        .map(|change| {
            let field = |key: &str| change.get(key).and_then(Value::as_str).unwrap_or("");
            format!(
                "  {} {} (pinned {} → listed {})\n",
                field("tool_id"),
                field("change"),
                change
                    .get("pinned")
                    .and_then(Value::as_str)
                    .unwrap_or("none"),
                field("listed")
            )
        })
        .collect()
}

fn show_text(runner: &Value) -> String {
    let names = |key: &str| {
        list(runner, key)
            .iter()
            .filter_map(|item| {
                item.as_str()
                    .or_else(|| item.get("consumer_id").and_then(Value::as_str))
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let pending = list(runner, "pending_tool_changes");
    let mut text = format!(
        "runner {}\n  connections: {}\n  tools: {}\n",
        runner
            .get("runner_id")
            .and_then(Value::as_str)
            .unwrap_or(""),
        names("consumers"),
        names("tools")
    );
    if pending.is_empty() {
        text.push_str("  no pending tool change\n");
    } else {
        text.push_str(&format!(
            "  {} pending tool change(s) (keel runners accept-changes):\n",
            pending.len()
        ));
        text.push_str(&change_lines(&pending));
    }
    text
}
