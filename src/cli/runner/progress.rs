//! Relays an MCP call's progress notifications to the kernel
//! (`POST /v0/runners/steps/{step}/progress`, docs/mcp.md "Progress"). Notifications that
//! arrive faster than [`MIN_INTERVAL`] are coalesced: the latest one is sent. The kernel keeps
//! at most 20 per step; errors are ignored (progress is informational).

use std::time::Duration;

use serde_json::json;
use tokio::sync::mpsc;

use super::connection::Shared;
use super::mcp::ProgressUpdate;
use super::protocol::Job;
use crate::cli::path_segment;

/// Shortest time between two progress posts of one job.
const MIN_INTERVAL: Duration = Duration::from_millis(250);

/// Longest `message` relayed, in bytes (the kernel keeps 512).
const MAX_MESSAGE_BYTES: usize = 512;

/// Posts the job's progress until the call ends (the channel closes).
pub async fn relay(shared: &Shared, job: &Job, mut updates: mpsc::Receiver<ProgressUpdate>) {
    let path = format!("/v0/runners/steps/{}/progress", path_segment(&job.step_id));
    let mut last: Option<tokio::time::Instant> = None;
    while let Some(mut update) = updates.recv().await {
        if let Some(last) = last {
            tokio::time::sleep_until(last + MIN_INTERVAL).await;
        }
        while let Ok(newer) = updates.try_recv() {
            update = newer;
        }
        let mut body = json!({
            "execution_id": job.execution_id,
            "runner_id": shared.runner_id,
            "progress": update.progress,
        });
        if let Some(total) = update.total.filter(|total| total.is_finite()) {
            body["total"] = json!(total);
        }
        if let Some(message) = update.message {
            body["message"] = json!(cut(message, MAX_MESSAGE_BYTES));
        }
        if !update.progress.is_finite() {
            continue;
        }
        if let Err(error) = shared.client.post(&path, Some(&body)).await {
            tracing::debug!(job_id = job.id, %error, "cannot relay the MCP progress");
        }
        last = Some(tokio::time::Instant::now());
    }
}

/// `text` cut to at most `max` bytes on a character boundary.
fn cut(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

#[cfg(test)]
mod tests {
    #[test]
    fn messages_are_cut_on_a_character_boundary() {
        assert_eq!(super::cut("ééé".to_owned(), 3), "é");
        assert_eq!(super::cut("abc".to_owned(), 5), "abc");
    }
}
