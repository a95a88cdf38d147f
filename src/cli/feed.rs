//! `keel events --all [--type PATTERN]... [--agent ID] [--after POSITION] [--tail]`: prints the
//! kernel-wide feed page by page (`/v0/events`), or follows `/v0/events/stream` until Ctrl-C,
//! reconnecting after the last position seen when the connection drops (or the kernel cut the
//! consumer off for being slow).

use std::time::Duration;

use serde_json::Value;

use super::client::{CliError, Client, read_stream_after};
use super::output::event_line;
use crate::config::OutputFormat;

/// Events asked per page (the kernel's maximum).
const PAGE: i64 = 1000;
/// Consecutive failed reconnects after which `--tail` gives up.
const MAX_RECONNECTS: u32 = 5;
/// Pause between reconnects.
const RECONNECT_DELAY: Duration = Duration::from_secs(1);

/// What to read.
pub struct FeedArgs<'a> {
    /// Type patterns (joined with commas).
    pub types: &'a [String],
    /// Only this agent's executions.
    pub agent: Option<&'a str>,
    /// Start after this position.
    pub after: i64,
}

impl FeedArgs<'_> {
    fn query(&self, after: i64) -> Vec<(&'static str, String)> {
        let mut query = vec![("after_position", after.to_string())];
        if !self.types.is_empty() {
            query.push(("types", self.types.join(",")));
        }
        if let Some(agent) = self.agent {
            query.push(("agent_id", agent.to_owned()));
        }
        query
    }
}

/// Prints every matching event after `args.after`, oldest first.
pub async fn print_snapshot(
    client: &Client,
    args: &FeedArgs<'_>,
    output: OutputFormat,
) -> Result<(), CliError> {
    let mut cursor = args.after;
    loop {
        let mut query = args.query(cursor);
        query.push(("limit", PAGE.to_string()));
        let page = client.get("/v0/events", &query).await?;
        for event in page
            .get("events")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default()
        {
            print_event(event, output);
        }
        let next = page
            .get("next_after_position")
            .and_then(Value::as_i64)
            .unwrap_or(cursor);
        let more = page.get("has_more").and_then(Value::as_bool) == Some(true);
        if !more || next <= cursor {
            return Ok(());
        }
        cursor = next;
    }
}

/// Follows the stream until interrupted.
pub async fn tail(
    client: &Client,
    args: &FeedArgs<'_>,
    output: OutputFormat,
) -> Result<(), CliError> {
    let mut cursor = args.after;
    let mut failures = 0;
    loop {
        match follow(client, args, &mut cursor, output).await {
            Ok(()) => failures = 0,
            Err(error @ CliError::Api { .. }) => return Err(error),
            Err(error) => {
                failures += 1;
                if failures > MAX_RECONNECTS {
                    return Err(error);
                }
                tracing::warn!(error = %error, attempt = failures, "event feed lost; reconnecting");
            }
        }
        tokio::time::sleep(RECONNECT_DELAY).await;
    }
}

/// Reads one stream connection until it ends.
async fn follow(
    client: &Client,
    args: &FeedArgs<'_>,
    cursor: &mut i64,
    output: OutputFormat,
) -> Result<(), CliError> {
    let query = args.query(*cursor);
    read_stream_after(
        client,
        "/v0/events/stream",
        &query,
        "position",
        cursor,
        |_, event| {
            print_event(event, output);
            false
        },
    )
    .await?;
    Ok(())
}

/// Prints one event: its position and execution, then the per-execution line.
fn print_event(event: &Value, output: OutputFormat) {
    match output {
        OutputFormat::Text => {
            let position = event
                .get("position")
                .and_then(Value::as_i64)
                .unwrap_or_default();
            let execution = event
                .get("execution_id")
                .and_then(Value::as_str)
                .unwrap_or_default();
            super::output::emit(&format!(
                "{position:>8}  {execution}  {}",
                event_line(event)
            ));
        }
        OutputFormat::Json => super::output::emit(&event.to_string()),
    }
}
