//! `keel events ID [--tail]`: prints an execution's events page by page from the snapshot
//! route, or follows its live stream (`/v0/executions/{id}/stream`) until the terminal event,
//! reconnecting from the last sequence seen when the connection drops.

use std::time::Duration;

use serde_json::Value;

use super::client::{CliError, Client, path_segment, read_stream_after};
use super::output::{event_line, is_terminal_event};
use crate::config::OutputFormat;

/// Events asked per snapshot page (the kernel's maximum).
const PAGE: i64 = 1000;
/// Consecutive failed reconnects after which `--tail` gives up.
const MAX_RECONNECTS: u32 = 5;
/// Pause between reconnects.
const RECONNECT_DELAY: Duration = Duration::from_secs(1);

/// Prints every event with `sequence > after`, oldest first.
pub async fn print_snapshot(
    client: &Client,
    id: &str,
    after: i64,
    output: OutputFormat,
) -> Result<(), CliError> {
    let path = format!("/v0/executions/{}/events", path_segment(id));
    // The snapshot route answers an empty page for unknown ids; check existence first.
    client
        .get(&format!("/v0/executions/{}", path_segment(id)), &[])
        .await?;
    let mut cursor = after;
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
        let events = page
            .get("events")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for event in &events {
            print_event(event, output);
            cursor = cursor.max(
                event
                    .get("sequence")
                    .and_then(Value::as_i64)
                    .unwrap_or(cursor),
            );
        }
        if events.is_empty() {
            return Ok(());
        }
    }
}

/// Follows the live stream from `after` until the execution ends.
pub async fn tail(
    client: &Client,
    id: &str,
    after: i64,
    output: OutputFormat,
) -> Result<(), CliError> {
    let path = format!("/v0/executions/{}/stream", path_segment(id));
    let mut cursor = after;
    let mut failures = 0;
    loop {
        let outcome = follow(client, &path, &mut cursor, output).await;
        match outcome {
            Ok(true) => return Ok(()),
            Ok(false) => failures = 0,
            Err(error @ CliError::Api { .. }) => return Err(error),
            Err(error) => {
                failures += 1;
                if failures > MAX_RECONNECTS {
                    return Err(error);
                }
                tracing::warn!(error = %error, attempt = failures, "event stream lost; reconnecting");
            }
        }
        tokio::time::sleep(RECONNECT_DELAY).await;
    }
}

/// Reads one stream connection; returns `true` once a terminal event was printed, `false` when
/// the stream ended without one.
async fn follow(
    client: &Client,
    path: &str,
    cursor: &mut i64,
    output: OutputFormat,
) -> Result<bool, CliError> {
    let query = [("after_sequence", cursor.to_string())];
    read_stream_after(client, path, &query, "sequence", cursor, |kind, event| {
        print_event(event, output);
        is_terminal_event(kind)
    })
    .await
}

/// Prints one event in the chosen format.
fn print_event(event: &Value, output: OutputFormat) {
    match output {
        OutputFormat::Text => super::output::emit(&event_line(event)),
        OutputFormat::Json => super::output::emit(&event.to_string()),
    }
}

/// `keel executions watch ID`: prints the events until the execution ends, then returns the
/// finished execution (its status and error decide the exit code).
pub async fn follow_to_end(
    client: &Client,
    id: &str,
    output: OutputFormat,
) -> Result<Value, CliError> {
    tail(client, id, 0, output).await?;
    client
        .get(&format!("/v0/executions/{}", path_segment(id)), &[])
        .await
}
