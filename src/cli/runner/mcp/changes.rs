//! Checking listed tools against the pins ([`super::pins`]): changed and new definitions are
//! withdrawn, and the published set follows; a `list_changed` notification lists them again.
//! The withdrawn tools are reported to the kernel as pending changes
//! (`POST /v0/runners/{id}/tool-changes`) until an operator accepts them there (`keel runners
//! accept-changes`); an accepted change is pinned and the tool published again.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::listing::{list_peer_tools, publishable};
use super::{McpServer, PublishedTool, STARTUP_TIMEOUT};

impl McpServer {
    /// Checks a listing against the pins: tools whose definition changed, and new ones, are
    /// withdrawn (unless changes are accepted); signals `republish` when the published set
    /// changed.
    pub(super) fn reconcile(&self, listed: Vec<Value>) {
        if let Ok(mut listing) = self.listing.lock() {
            listing.clone_from(&listed);
        }
        let tools = publishable(listed, &self.spec.prefix, &self.spec.only);
        let named: Vec<(String, String)> = tools
            .iter()
            .map(|tool| (tool.name.clone(), tool.digest.clone()))
            .collect();
        let (allowed, withdrawn, _) = match self.pins.lock() {
            Ok(mut pins) => {
                let checked = pins.check(&named, self.spec.accept_tool_changes);
                if checked.2
                    && let Some(path) = &self.spec.pin_file
                    && let Err(error) = pins.save(path)
                {
                    tracing::error!(%error, "cannot save the MCP tool pins");
                }
                checked
            }
            Err(_) => return,
        };
        let mut reasons = HashMap::new();
        for tool in withdrawn {
            let id = format!("{}{}", self.spec.prefix, tool.name);
            tracing::warn!(
                tool = id,
                change = tool.describe(),
                "MCP tool withdrawn: its definition is not the pinned one (accept it with `keel runners accept-changes` or --accept-tool-changes)"
            );
            reasons.insert(id, tool);
        }
        let active: HashMap<String, PublishedTool> = tools
            .into_iter()
            .filter(|tool| allowed.contains(&tool.name))
            .map(|tool| (tool.id.clone(), tool))
            .collect();
        let changed = match self.active.write() {
            Ok(mut current) => {
                let changed = *current != active;
                *current = active;
                changed
            }
            Err(_) => false,
        };
        if let Ok(mut current) = self.withdrawn.write()
            && *current != reasons
        {
            *current = reasons;
            self.changes.notify_one();
        }
        if changed {
            self.republish.notify_one();
        }
    }

    /// Lists the tools again whenever the server says they changed.
    pub async fn watch_list_changes(self: Arc<Self>) {
        loop {
            self.notices.list_changed.notified().await;
            let peer = {
                let state = self.state.lock().await;
                state.live.as_ref().map(|live| live.service.peer().clone())
            };
            let Some(peer) = peer else { continue };
            match tokio::time::timeout(STARTUP_TIMEOUT, list_peer_tools(&peer)).await {
                Ok(Ok(listed)) => {
                    tracing::info!("the MCP server's tool list changed; checking it");
                    self.reconcile(listed);
                }
                Ok(Err(error)) => tracing::warn!(%error, "cannot list the changed MCP tools"),
                Err(_) => tracing::warn!("listing the changed MCP tools timed out"),
            }
        }
    }

    /// The body of `POST /v0/runners/{id}/tool-changes`: every withdrawn tool.
    pub fn changes_body(&self) -> Value {
        let mut changes: Vec<Value> = self
            .withdrawn
            .read()
            .map(|withdrawn| {
                withdrawn
                    .iter()
                    .map(|(id, tool)| {
                        json!({
                            "tool_id": id,
                            "change": if tool.pinned.is_some() { "changed" } else { "new" },
                            "pinned": tool.pinned,
                            "listed": tool.listed,
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        changes.sort_by(|left, right| left["tool_id"].as_str().cmp(&right["tool_id"].as_str()));
        json!({ "changes": changes })
    }

    /// Pins the changes an operator accepted (`{tool_id, listed}` objects) that are still the
    /// ones withdrawn, and checks the last listing again (which publishes them). Returns how
    /// many were pinned.
    pub fn accept(&self, accepted: &[Value]) -> usize {
        let mut pinned = 0;
        if let (Ok(withdrawn), Ok(mut pins)) = (self.withdrawn.read(), self.pins.lock()) {
            for change in accepted {
                let tool_id = change.get("tool_id").and_then(Value::as_str).unwrap_or("");
                let listed = change.get("listed").and_then(Value::as_str).unwrap_or("");
                let Some(tool) = withdrawn.get(tool_id).filter(|tool| tool.listed == listed) else {
                    continue;
                };
                tracing::info!(
                    tool = tool_id,
                    listed,
                    "MCP tool change accepted by an operator"
                );
                pins.0.insert(tool.name.clone(), tool.listed.clone());
                pinned += 1;
            }
            if pinned > 0
                && let Some(path) = &self.spec.pin_file
                && let Err(error) = pins.save(path)
            {
                tracing::error!(%error, "cannot save the MCP tool pins");
            }
        }
        if pinned > 0 {
            let listing = self
                .listing
                .lock()
                .map(|listing| listing.clone())
                .unwrap_or_default();
            self.reconcile(listing);
        }
        pinned
    }
}
