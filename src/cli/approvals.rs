//! `keel approvals`, `keel approve ID [--reason]`, `keel deny ID --reason`: the approvals
//! waiting for an answer, and answering them (docs/security.md).

use clap::Args;
use serde_json::{Value, json};

use super::CliError;
use super::client::{Client, path_segment};
use super::output;
use crate::config::{ClientConfig, OutputFormat};

/// `keel approve ID` / `keel deny ID`.
#[derive(Debug, Args)]
pub struct AnswerArgs {
    /// Approval id (`<execution id>.<step id>`, as `keel approvals` lists it).
    pub id: String,
    /// Why (recorded; a deny reason is sent to the agent).
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    /// Kernel connection and output flags.
    #[command(flatten)]
    pub client: ClientConfig,
}

/// Lists the approvals nobody answered yet.
pub async fn list(config: &ClientConfig) -> Result<(), CliError> {
    let client = Client::new(config)?;
    let answer = client.get("/v0/approvals", &[]).await?;
    match config.output {
        OutputFormat::Json => output::emit(&output::pretty(&answer)),
        OutputFormat::Text => {
            let approvals = answer
                .get("approvals")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            if approvals.is_empty() {
                output::emit("no approval is waiting");
                return Ok(());
            }
            let text = |entry: &Value, key: &str| {
                entry
                    .get(key)
                    .map(|value| {
                        value
                            .as_str()
                            .map_or_else(|| value.to_string(), str::to_owned)
                    })
                    .unwrap_or_default()
            };
            let mut lines = vec![format!(
                "{:<74} {:<20} {:<24} {:<28} REASON",
                "ID", "AGENT", "TOOL", "REQUESTED"
            )];
            for entry in &approvals {
                lines.push(format!(
                    "{:<74} {:<20} {:<24} {:<28} {}",
                    text(entry, "id"),
                    text(entry, "agent_id"),
                    text(entry, "tool_id"),
                    text(entry, "requested_at"),
                    text(entry, "reason"),
                ));
            }
            output::emit(&lines.join("\n"));
        }
    }
    Ok(())
}

/// Approves (`approved`) or denies one approval.
pub async fn answer(args: &AnswerArgs, approved: bool) -> Result<(), CliError> {
    if !approved && args.reason.as_deref().is_none_or(str::is_empty) {
        return Err(CliError::Failed(
            "keel deny needs --reason: the agent is told why".to_owned(),
        ));
    }
    let client = Client::new(&args.client)?;
    let mut body = json!({"decision": if approved { "approve" } else { "deny" }});
    if let Some(reason) = &args.reason {
        body["reason"] = json!(reason);
    }
    let answer = client
        .post(
            &format!("/v0/approvals/{}", path_segment(&args.id)),
            Some(&body),
        )
        .await?;
    match args.client.output {
        OutputFormat::Json => output::emit(&output::pretty(&answer)),
        OutputFormat::Text => output::emit(&format!(
            "{} {}",
            args.id,
            if approved { "approved" } else { "denied" }
        )),
    }
    Ok(())
}
