//! Pending MCP tool-definition changes (docs/mcp.md, "Pinning"). A `keel runner --mcp` that
//! withdrew tools because their definition is not the pinned one reports them here
//! (`POST /v0/runners/{id}/tool-changes`, the whole pending list each time); an operator sees
//! them (`GET /v0/runners/{id}`, `keel runners show`) and accepts them
//! (`POST /v0/runners/{id}/tool-changes/accept`, `keel runners accept-changes`). The runner's
//! next report learns which changes were accepted, pins them and publishes the tools again.
//! An acceptance names the digest it accepts: a later, different change is pending again.
//!
//! The list lives in the kernel's memory: a runner reports it again after a kernel restart
//! (it keeps reporting while anything is pending). In cluster mode a report and an acceptance
//! are copied to every live kernel (`crate::cluster::publish`), so each holds the same list.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request, State};
use keel_actors::kernel::Kernel;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::AppState;
use super::body::read_json;
use super::error::ApiError;
use super::executions::{check_length, check_required_id, path_id};

/// Most changes one runner may report.
const MAX_CHANGES: usize = 1000;

/// One withdrawn tool whose definition waits for an operator.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolChange {
    /// Keel tool id.
    pub tool_id: String,
    /// `changed` (the definition is not the pinned one) or `new` (never pinned).
    pub change: String,
    /// The pinned digest (absent for a new tool).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinned: Option<String>,
    /// The digest of the definition the server lists now.
    pub listed: String,
}

/// What the kernel knows of one runner's changes.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RunnerChanges {
    /// Changes the runner reported and nobody accepted yet.
    pub pending: Vec<ToolChange>,
    /// Changes accepted and not yet taken up by the runner.
    pub accepted: Vec<ToolChange>,
}

/// Labels of `keel_mcp_tool_changes_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ChangeLabels {
    runner_id: String,
    tool_id: String,
}

/// The pending changes of every runner, and their metric.
#[derive(Debug, Default)]
pub struct ToolChanges {
    runners: Mutex<HashMap<String, RunnerChanges>>,
    reported: Family<ChangeLabels, Counter>,
}

impl ToolChanges {
    /// Creates the registry and registers `keel_mcp_tool_changes_total` with the kernel's.
    pub fn register(kernel: &Kernel) -> Self {
        let changes = Self::default();
        kernel.metrics().register(
            "mcp_tool_changes",
            "MCP tool definitions that changed under a runner and were withdrawn (each change counted once, when first reported)",
            changes.reported.clone(),
        );
        changes
    }

    /// Replaces a runner's pending list; returns the changes an operator accepted (the runner
    /// pins them). New changes are counted and logged.
    pub fn report(&self, runner_id: &str, changes: Vec<ToolChange>) -> Vec<ToolChange> {
        let Ok(mut runners) = self.runners.lock() else {
            return Vec::new();
        };
        let entry = runners.entry(runner_id.to_owned()).or_default();
        for change in &changes {
            let known = entry.pending.contains(change) || entry.accepted.contains(change);
            if !known {
                tracing::warn!(
                    runner_id,
                    tool_id = change.tool_id,
                    change = change.change,
                    pinned = change.pinned.as_deref().unwrap_or("none"),
                    listed = change.listed,
                    "MCP tool definition changed: withdrawn until an operator accepts it (keel runners accept-changes)"
                );
                self.reported
                    .get_or_create(&ChangeLabels {
                        runner_id: keel_actors::metrics::labels::escape(runner_id),
                        tool_id: keel_actors::metrics::labels::escape(&change.tool_id),
                    })
                    .inc();
            }
        }
        entry.accepted.retain(|accepted| changes.contains(accepted));
        entry.pending = changes
            .into_iter()
            .filter(|change| !entry.accepted.contains(change))
            .collect();
        let accepted = entry.accepted.clone();
        if entry.pending.is_empty() && entry.accepted.is_empty() {
            runners.remove(runner_id);
        }
        accepted
    }

    /// Accepts a runner's pending changes (all, or those of `tools`); returns them.
    pub fn accept(&self, runner_id: &str, tools: &[String]) -> Vec<ToolChange> {
        let Ok(mut runners) = self.runners.lock() else {
            return Vec::new();
        };
        let Some(entry) = runners.get_mut(runner_id) else {
            return Vec::new();
        };
        let (taken, kept): (Vec<ToolChange>, Vec<ToolChange>) = entry
            .pending
            .drain(..)
            .partition(|change| tools.is_empty() || tools.contains(&change.tool_id));
        entry.pending = kept;
        entry.accepted.extend(taken.iter().cloned());
        taken
    }

    /// A runner's changes (empty lists when it has none).
    pub fn of(&self, runner_id: &str) -> RunnerChanges {
        self.runners
            .lock()
            .ok()
            .and_then(|runners| runners.get(runner_id).cloned())
            .unwrap_or_default()
    }

    /// Every runner's changes, by runner id.
    pub fn all(&self) -> BTreeMap<String, RunnerChanges> {
        self.runners
            .lock()
            .map(|runners| runners.clone().into_iter().collect())
            .unwrap_or_default()
    }
}

#[derive(Deserialize)]
struct ReportRequest {
    changes: Option<Vec<ToolChange>>,
}

#[derive(Deserialize)]
struct AcceptRequest {
    tools: Option<Vec<String>>,
}

/// The runner id of the path: non-empty, at most 256 bytes.
fn runner_id(path: Result<Path<String>, PathRejection>) -> Result<String, ApiError> {
    let id = path_id(path)?;
    check_required_id("runner_id", &id)?;
    Ok(id)
}

/// `POST /v0/runners/{id}/tool-changes`: the runner's whole pending list; answers the changes
/// an operator accepted.
pub async fn report(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    request: Request,
) -> Result<Json<Value>, ApiError> {
    let runner = runner_id(path)?;
    let body: ReportRequest = read_json(
        request,
        state.settings.body_limit,
        state.settings.body_read_timeout,
    )
    .await?;
    let changes = body.changes.unwrap_or_default();
    if changes.len() > MAX_CHANGES {
        return Err(ApiError::validation(format_args!(
            "at most {MAX_CHANGES} changes"
        )));
    }
    for (index, change) in changes.iter().enumerate() {
        check_required_id(&format!("changes[{index}].tool_id"), &change.tool_id)?;
        check_length(&format!("changes[{index}].listed"), &change.listed)?;
        if !matches!(change.change.as_str(), "changed" | "new") {
            return Err(ApiError::validation(format_args!(
                "changes[{index}].change must be \"changed\" or \"new\""
            )));
        }
    }
    let accepted = state.tool_changes.report(&runner, changes);
    Ok(Json(json!({ "accepted": accepted })))
}

/// `POST /v0/runners/{id}/tool-changes/accept` (operators): accepts the runner's pending
/// changes, all or those of `tools`; 404 when none matches.
pub async fn accept(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    request: Request,
) -> Result<Json<Value>, ApiError> {
    let runner = runner_id(path)?;
    let principal = super::keys::principal_of(&request);
    let body: AcceptRequest = read_json(
        request,
        state.settings.body_limit,
        state.settings.body_read_timeout,
    )
    .await?;
    let tools = body.tools.unwrap_or_default();
    let accepted = state.tool_changes.accept(&runner, &tools);
    if accepted.is_empty() {
        return Err(ApiError::NotFound(format!(
            "runner {runner:?} has no pending tool change{}",
            if tools.is_empty() {
                String::new()
            } else {
                format!(" for {}", tools.join(", "))
            }
        )));
    }
    tracing::info!(
        runner_id = runner,
        by = %principal.name,
        tools = ?accepted.iter().map(|change| change.tool_id.as_str()).collect::<Vec<_>>(),
        "MCP tool changes accepted"
    );
    Ok(Json(json!({ "accepted": accepted })))
}

/// `GET /v0/runners/{id}`: the runner's connections, published tools and tool changes.
pub async fn show(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let runner = runner_id(path)?;
    let listed = crate::console::api::runner_list(&state)
        .into_iter()
        .find(|entry| entry.runner_id == runner);
    let changes = state.tool_changes.of(&runner);
    let tools: Vec<String> = match &listed {
        Some(entry) => entry.tools.clone(),
        None => state
            .kernel
            .tools("")
            .into_iter()
            .filter(|tool| tool.runner_id == runner)
            .map(|tool| tool.id.to_string())
            .collect(),
    };
    if listed.is_none()
        && tools.is_empty()
        && changes.pending.is_empty()
        && changes.accepted.is_empty()
    {
        return Err(ApiError::NotFound(format!("runner {runner:?} not found")));
    }
    Ok(Json(json!({
        "runner_id": runner,
        "consumers": listed.map(|entry| entry.consumers).unwrap_or_default(),
        "tools": tools,
        "pending_tool_changes": changes.pending,
        "accepted_tool_changes": changes.accepted,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(tool: &str, listed: &str) -> ToolChange {
        ToolChange {
            tool_id: tool.to_owned(),
            change: "changed".to_owned(),
            pinned: Some("sha256:old".to_owned()),
            listed: listed.to_owned(),
        }
    }

    #[test]
    fn an_acceptance_holds_for_the_digest_it_accepted() {
        let changes = ToolChanges::default();
        assert!(
            changes
                .report("r", vec![change("a", "1"), change("b", "2")])
                .is_empty()
        );
        assert_eq!(changes.of("r").pending.len(), 2);
        assert_eq!(changes.accept("r", &["a".to_owned()]), [change("a", "1")]);
        assert!(changes.accept("r", &["zzz".to_owned()]).is_empty());
        assert!(changes.accept("other", &[]).is_empty());
        // The runner's next report learns the acceptance; b stays pending.
        let accepted = changes.report("r", vec![change("a", "1"), change("b", "2")]);
        assert_eq!(accepted, [change("a", "1")]);
        assert_eq!(changes.of("r").pending, [change("b", "2")]);
        // `a` changed again before the runner took it up: the new digest is pending.
        let accepted = changes.report("r", vec![change("a", "3"), change("b", "2")]);
        assert!(accepted.is_empty());
        assert_eq!(changes.of("r").pending.len(), 2);
        // Nothing pending: the runner is forgotten.
        assert!(changes.report("r", Vec::new()).is_empty());
        assert!(changes.all().is_empty());
    }
}
