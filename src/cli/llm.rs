//! `keel llm export EXECUTION > cassette.json`: the answers an execution's model calls got
//! through the LLM gateway, read from its events, as a cassette a kernel started with
//! `--llm-cassette` serves (docs/llm.md, "Cassettes").

use clap::Subcommand;
use serde_json::Value;

use super::client::{CliError, Client, path_segment};
use super::output;
use crate::config::ClientConfig;
use crate::gateway::cassette::CassetteFile;

/// Events asked per page (the kernel's maximum).
const PAGE: i64 = 1000;

/// `keel llm …`.
#[derive(Debug, Subcommand)]
pub enum LlmCommand {
    /// Prints an execution's recorded model calls as a cassette (JSON) for `--llm-cassette`.
    Export {
        /// Execution id.
        execution_id: String,
        /// Kernel connection flags.
        #[command(flatten)]
        client: ClientConfig,
    },
}

impl LlmCommand {
    /// The connection flags.
    pub fn client(&self) -> &ClientConfig {
        match self {
            LlmCommand::Export { client, .. } => client,
        }
    }
}

/// Runs a `keel llm` command.
pub async fn run(command: &LlmCommand) -> Result<(), CliError> {
    let LlmCommand::Export {
        execution_id,
        client,
    } = command;
    let client = Client::new(client)?;
    // The events route answers an empty page for an unknown id; this refuses it.
    client
        .get(
            &format!("/v0/executions/{}", path_segment(execution_id)),
            &[],
        )
        .await?;
    let path = format!("/v0/executions/{}/events", path_segment(execution_id));
    let mut events = Vec::new();
    let mut cursor = 0;
    loop {
        let page = client
            .get(
                &path,
                &[
                    ("after_sequence", cursor.to_string()),
                    ("limit", PAGE.to_string()),
                ],
            )
            .await?;
        let page = page
            .get("events")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let Some(last) = page
            .last()
            .and_then(|event| event.get("sequence"))
            .and_then(Value::as_i64)
        else {
            break;
        };
        cursor = last;
        events.extend(page);
    }
    let (cassette, skipped) = CassetteFile::from_events(execution_id, &events);
    if skipped > 0 {
        eprintln!(
            "{skipped} completed model calls have no stored answer (store_bodies off, or larger \
             than the stored-body limit) and are not in the cassette"
        );
    }
    let text = serde_json::to_string_pretty(&cassette)
        .map_err(|error| CliError::Failed(format!("cannot write the cassette: {error}")))?;
    output::emit(&text);
    Ok(())
}
