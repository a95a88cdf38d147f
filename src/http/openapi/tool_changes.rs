//! The document's entries for a runner's view and its MCP tool-definition changes
//! (docs/mcp.md, "Pinning").

#![allow(dead_code)] // The functions and types only carry the attributes.

use utoipa::ToSchema;

use super::answers::Unauthorized;
use super::schemas::Error;

/// A withdrawn MCP tool whose definition waits for an operator.
#[derive(ToSchema)]
pub struct ToolChange {
    /// Keel tool id.
    pub tool_id: String,
    /// `changed` or `new`.
    pub change: String,
    /// The pinned digest (absent for a new tool).
    #[schema(required = false)]
    pub pinned: Option<String>,
    /// The digest of the definition listed now.
    pub listed: String,
}

/// Body of `POST /v0/runners/{id}/tool-changes`: the runner's whole pending list.
#[derive(ToSchema)]
pub struct ToolChangeReport {
    pub changes: Vec<ToolChange>,
}

/// Body of `POST /v0/runners/{id}/tool-changes/accept`.
#[derive(ToSchema)]
pub struct ToolChangeAccept {
    /// Tool ids to accept (absent or empty: every pending change).
    #[schema(required = false)]
    pub tools: Option<Vec<String>>,
}

/// Changes an operator accepted.
#[derive(ToSchema)]
pub struct ToolChangesAccepted {
    pub accepted: Vec<ToolChange>,
}

/// One runner: connections, published tools and tool changes.
#[derive(ToSchema)]
pub struct RunnerView {
    pub runner_id: String,
    /// Its open streams.
    pub consumers: Vec<super::console::Connection>,
    /// Tool ids it publishes.
    pub tools: Vec<String>,
    /// Withdrawn tools waiting for an operator.
    pub pending_tool_changes: Vec<ToolChange>,
    /// Accepted changes the runner has not taken up yet.
    pub accepted_tool_changes: Vec<ToolChange>,
}

#[utoipa::path(get, path = "/v0/runners/{id}", tag = "runners",
    params(("id" = String, Path, description = "Runner id")),
    responses(
        (status = 200, description = "The runner", body = RunnerView),
        Unauthorized,
        (status = 404, description = "No such runner", body = Error),
    ))]
fn runner() {}

#[utoipa::path(post, path = "/v0/runners/{id}/tool-changes", tag = "runners",
    params(("id" = String, Path, description = "Runner id")),
    request_body = ToolChangeReport,
    responses(
        (status = 200, description = "Recorded; answers the changes an operator accepted", body = ToolChangesAccepted),
        (status = 400, description = "Malformed change", body = Error),
        Unauthorized,
    ))]
fn report_tool_changes() {}

#[utoipa::path(post, path = "/v0/runners/{id}/tool-changes/accept", tag = "runners",
    params(("id" = String, Path, description = "Runner id")),
    request_body = ToolChangeAccept,
    responses(
        (status = 200, description = "Accepted; the runner pins them at its next report", body = ToolChangesAccepted),
        Unauthorized,
        (status = 403, description = "Not an operator", body = Error),
        (status = 404, description = "No pending change matches", body = Error),
    ))]
fn accept_tool_changes() {}
