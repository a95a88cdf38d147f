//! Reports an MCP server's withdrawn tools to the kernel (`POST /v0/runners/{id}/tool-changes`)
//! whenever they change, and every [`POLL`] while any is pending: the answer names the changes
//! an operator accepted (`keel runners accept-changes`), which are then pinned and published.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::connection::Shared;
use super::mcp::McpServer;
use crate::cli::path_segment;

/// Time between two reports while changes are pending.
const POLL: Duration = Duration::from_secs(2);

/// Reports until the runner stops.
pub async fn report(shared: Arc<Shared>, server: Arc<McpServer>) {
    let path = format!(
        "/v0/runners/{}/tool-changes",
        path_segment(&shared.runner_id)
    );
    let mut last: Option<Value> = None;
    loop {
        let body = server.changes_body();
        let pending = body["changes"]
            .as_array()
            .is_some_and(|changes| !changes.is_empty());
        if pending || last.as_ref().is_some_and(|last| *last != body) {
            match shared.client.post(&path, Some(&body)).await {
                Ok(answer) => {
                    last = Some(body);
                    let accepted = answer["accepted"].as_array().cloned().unwrap_or_default();
                    if !accepted.is_empty() && server.accept(&accepted) > 0 {
                        // Report the shorter list at once.
                        continue;
                    }
                }
                Err(error) => tracing::warn!(%error, "cannot report the MCP tool changes"),
            }
        }
        let wait = if pending {
            POLL
        } else {
            Duration::from_secs(3600)
        };
        tokio::select! {
            () = server.changes.notified() => {}
            () = tokio::time::sleep(wait) => {}
        }
    }
}
