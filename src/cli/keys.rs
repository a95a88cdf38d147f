//! `keel keys list|create|rotate|revoke`: the admin API of API keys (docs/security.md). The
//! secret of a new or rotated key is printed once, on its own line, and never again.

use clap::{Args, Subcommand};
use serde_json::{Map, Value, json};

use super::CliError;
use super::client::{Client, path_segment};
use super::output;
use crate::config::{ClientConfig, OutputFormat};

/// `keel keys …`.
#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Lists every key (never a secret).
    List {
        /// Kernel connection and output flags.
        #[command(flatten)]
        client: ClientConfig,
    },
    /// Creates a key and prints its secret, once.
    Create(CreateKeyArgs),
    /// Replaces a key's secret (the old one stops working at once) and prints the new one.
    Rotate {
        /// Key name.
        name: String,
        /// Kernel connection and output flags.
        #[command(flatten)]
        client: ClientConfig,
    },
    /// Revokes a key: refused from the next request on, its open streams end.
    Revoke {
        /// Key name.
        name: String,
        /// Kernel connection and output flags.
        #[command(flatten)]
        client: ClientConfig,
    },
}

/// `keel keys create NAME --role ROLE`.
#[derive(Debug, Args)]
pub struct CreateKeyArgs {
    /// Unique name (the principal its requests act as).
    pub name: String,
    /// admin, operator, agent, runner, approver or reader.
    #[arg(long, value_name = "ROLE")]
    pub role: String,
    /// Agent-id glob the key serves (agent keys: at least one; repeatable).
    #[arg(long = "agent", value_name = "GLOB")]
    pub agents: Vec<String>,
    /// Runner-id glob the key serves (runner keys: at least one; repeatable).
    #[arg(long = "runner", value_name = "GLOB")]
    pub runners: Vec<String>,
    /// Tool-id glob a runner key may serve (repeatable; none: any).
    #[arg(long = "tool", value_name = "GLOB")]
    pub tools: Vec<String>,
    /// `key=value` label (value `*`: any) its creations may carry (repeatable; none: any).
    #[arg(long = "label", value_name = "KEY=VALUE")]
    pub labels: Vec<String>,
    /// Expiry, RFC 3339 (e.g. 2027-01-01T00:00:00Z).
    #[arg(long, value_name = "TIME")]
    pub expires_at: Option<String>,
    /// Kernel connection and output flags.
    #[command(flatten)]
    pub client: ClientConfig,
}

impl KeysCommand {
    /// The connection flags of the command.
    pub fn client(&self) -> &ClientConfig {
        match self {
            KeysCommand::List { client }
            | KeysCommand::Rotate { client, .. }
            | KeysCommand::Revoke { client, .. } => client,
            KeysCommand::Create(args) => &args.client,
        }
    }
}

/// Runs a `keel keys` command.
pub async fn run(command: &KeysCommand) -> Result<(), CliError> {
    let config = command.client();
    let client = Client::new(config)?;
    match command {
        KeysCommand::List { .. } => {
            let answer = client.get("/v0/keys", &[]).await?;
            match config.output {
                OutputFormat::Json => output::emit(&output::pretty(&answer)),
                OutputFormat::Text => output::emit(&table(
                    answer
                        .get("keys")
                        .and_then(Value::as_array)
                        .map_or(&[], Vec::as_slice),
                )),
            }
        }
        KeysCommand::Create(args) => {
            let mut scopes = Map::new();
            for (name, values) in [
                ("agents", &args.agents),
                ("runners", &args.runners),
                ("tools", &args.tools),
                ("labels", &args.labels),
            ] {
                if !values.is_empty() {
                    scopes.insert(name.to_owned(), json!(values));
                }
            }
            let mut body = json!({"name": args.name, "role": args.role, "scopes": scopes});
            if let Some(expires_at) = &args.expires_at {
                body["expires_at"] = json!(expires_at);
            }
            let answer = client.post("/v0/keys", Some(&body)).await?;
            issued(&answer, config.output, "created");
        }
        KeysCommand::Rotate { name, .. } => {
            let path = format!("/v0/keys/{}/rotate", path_segment(name));
            let answer = client.post(&path, None).await?;
            issued(&answer, config.output, "rotated");
        }
        KeysCommand::Revoke { name, .. } => {
            let answer = client
                .delete(&format!("/v0/keys/{}", path_segment(name)))
                .await?;
            match config.output {
                OutputFormat::Json => output::emit(&output::pretty(&answer)),
                OutputFormat::Text => output::emit(&format!("key {name} revoked")),
            }
        }
    }
    Ok(())
}

/// Prints a new or rotated key: its secret alone on the first line (text), or the answer.
fn issued(answer: &Value, format: OutputFormat, what: &str) {
    match format {
        OutputFormat::Json => output::emit(&output::pretty(answer)),
        OutputFormat::Text => {
            let secret = answer
                .get("secret")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let name = answer["key"]
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let role = answer["key"]
                .get("role")
                .and_then(Value::as_str)
                .unwrap_or_default();
            output::emit(&format!(
                "{secret}\n# key {name} ({role}) {what}: this secret is shown once; store it now"
            ));
        }
    }
}

/// Renders keys as a table.
fn table(keys: &[Value]) -> String {
    if keys.is_empty() {
        return "no API keys".to_owned();
    }
    let text = |key: &Value, field: &str| {
        key.get(field)
            .and_then(Value::as_str)
            .unwrap_or("-")
            .to_owned()
    };
    let mut lines = vec![format!(
        "{:<24} {:<9} {:<8} {:<28} {:<28} SCOPES",
        "NAME", "ROLE", "STATE", "EXPIRES", "LAST USED"
    )];
    for key in keys {
        let scopes = key
            .get("scopes")
            .and_then(Value::as_object)
            .map(|scopes| {
                scopes
                    .iter()
                    .map(|(kind, values)| format!("{kind}={}", values_list(values)))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_default();
        lines.push(format!(
            "{:<24} {:<9} {:<8} {:<28} {:<28} {}",
            text(key, "name"),
            text(key, "role"),
            text(key, "state"),
            text(key, "expires_at"),
            text(key, "last_used_at"),
            if scopes.is_empty() {
                "-".to_owned()
            } else {
                scopes
            }
        ));
    }
    lines.join("\n")
}

fn values_list(values: &Value) -> String {
    values
        .as_array()
        .map(|values| {
            values
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default()
}
