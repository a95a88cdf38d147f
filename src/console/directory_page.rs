//! The directory view: connected agents (and agent ids waiting for one), runners with the MCP
//! tool-definition changes they withdrew until an operator accepts them, and the tool
//! directory.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::response::Response;
use maud::{Markup, html};

use super::api;
use super::pages::list_link;
use super::render::{json_block, json_preview, view, when};
use super::viewer::Viewer;
use crate::http::tool_changes::RunnerChanges;
use crate::http::{ApiError, AppState};

/// `GET /console/view/directory`: connected agents, runners and the tool directory.
pub async fn directory(
    State(state): State<AppState>,
    viewer: Viewer,
) -> Result<Response, ApiError> {
    let agents = api::agent_list(&state).await?;
    let runners = api::runner_list(&state);
    let tools = state.kernel.tools("");
    let changes = state.tool_changes.all();
    // Agent ids with pending work and no consumer connected: their executions wait.
    let unserved: Vec<_> = state
        .kernel
        .queue_depths()
        .await?
        .pending_by_agent
        .into_iter()
        .filter(|(agent_id, pending, _)| {
            *pending > 0
                && !agents
                    .iter()
                    .any(|agent| agent.agent_id == agent_id.as_str())
        })
        .collect();
    let markup = html! {
        div data-page="directory" data-live-interval="3000" data-principal=(viewer.name) data-role=(viewer.role.as_str()) {
            h1 { "Agents, runners and tools" }
            div id="directory-live" data-live {
                h2 id="agents-title" { "Agents (" (agents.len()) " connected)" }
                table aria-labelledby="agents-title" {
                    thead { tr { th scope="col" { "Agent" } th scope="col" { "Consumers" } th scope="col" { "Connected since" } th scope="col" { "Pending executions" } } }
                    tbody {
                        @if agents.is_empty() { tr { td colspan="4" class="muted" { "No agent is connected." } } }
                        @for agent in &agents {
                            tr data-agent-id=(agent.agent_id) {
                                td class="mono" { (agent.agent_id) }
                                td { @for consumer in &agent.consumers { span class="mono" { (consumer.consumer_id) } " " } }
                                td { @if let Some(first) = agent.consumers.iter().map(|c| c.connected_at).min() { (when(&first)) } }
                                td { a href=(list_link([("status", "pending"), ("agent_id", agent.agent_id.as_str())])) { (agent.pending) } }
                            }
                        }
                    }
                }
                @if !unserved.is_empty() {
                    h2 id="unserved-title" { "Waiting for an agent (" (unserved.len()) ")" }
                    p class="muted" { "These agent ids have pending executions and no consumer connected to this kernel: their executions wait until one connects or they time out." }
                    table aria-labelledby="unserved-title" {
                        thead { tr { th scope="col" { "Agent" } th scope="col" { "Pending executions" } th scope="col" { "Oldest created" } } }
                        tbody {
                            @for (agent_id, pending, oldest) in &unserved {
                                tr data-unserved-agent=(agent_id.as_str()) {
                                    td class="mono" { (agent_id.as_str()) }
                                    td { a href=(list_link([("status", "pending"), ("agent_id", agent_id.as_str())])) { (pending) } }
                                    td { (when(oldest)) }
                                }
                            }
                        }
                    }
                }
                h2 id="runners-title" { "Runners (" (runners.len()) " connected)" }
                table aria-labelledby="runners-title" {
                    thead { tr { th scope="col" { "Runner" } th scope="col" { "Consumers" } th scope="col" { "Capabilities" } th scope="col" { "Tools" } } }
                    tbody {
                        @if runners.is_empty() { tr { td colspan="4" class="muted" { "No runner is connected." } } }
                        @for runner in &runners {
                            tr data-runner-id=(runner.runner_id) {
                                td class="mono" { (runner.runner_id) }
                                td { @for consumer in &runner.consumers { span class="mono" { (consumer.consumer_id) } " " } }
                                td { @for consumer in &runner.consumers { @for capability in &consumer.capabilities { span class="label" { (capability) } " " } } }
                                td {
                                    (runner.tools.join(", "))
                                    @if let Some(pending) = changes.get(&runner.runner_id).map(|changes| changes.pending.len()).filter(|count| *count > 0) {
                                        " " a class="label" href="#tool-changes-title" { (pending) " withdrawn" }
                                    }
                                }
                            }
                        }
                    }
                }
                (tool_changes(&changes))
                h2 id="tools-title" { "Tool directory (" (tools.len()) ")" }
                table aria-labelledby="tools-title" {
                    thead { tr { th scope="col" { "Tool" } th scope="col" { "Runner" } th scope="col" { "Description" } th scope="col" { "Input schema" } th scope="col" { "Published" } } }
                    tbody {
                        @if tools.is_empty() { tr { td colspan="5" class="muted" { "No runner published a tool." } } }
                        @for tool in &tools {
                            tr data-tool-id=(tool.id) {
                                td class="mono" { (tool.id) }
                                td class="mono" { (tool.runner_id) }
                                td { (tool.description.as_str().map(str::to_owned).unwrap_or_else(|| json_preview(&tool.description, 80))) }
                                td { details { summary { "schema" } (json_block(&tool.input_schema)) } }
                                td { (when(&tool.registered_at)) }
                            }
                        }
                    }
                }
            }
        }
    };
    Ok(view(markup))
}

/// The MCP tool-definition changes runners withdrew, pending an operator's acceptance (and
/// those accepted that the runner has not taken up yet); nothing when there are none.
fn tool_changes(changes: &BTreeMap<String, RunnerChanges>) -> Markup {
    let rows: Vec<(&str, &str, &crate::http::tool_changes::ToolChange)> = changes
        .iter()
        .flat_map(|(runner_id, changes)| {
            let pending = changes
                .pending
                .iter()
                .map(move |change| (runner_id.as_str(), "pending", change));
            let accepted = changes
                .accepted
                .iter()
                .map(move |change| (runner_id.as_str(), "accepted", change));
            pending.chain(accepted)
        })
        .collect();
    if rows.is_empty() {
        return html! {};
    }
    html! {
        h2 id="tool-changes-title" { "Tool definition changes (" (rows.len()) ")" }
        p class="muted" {
            "These MCP tools changed under their runner and are withdrawn: agents cannot call them until an operator accepts the change ("
            code { "keel runners accept-changes RUNNER" } "). An accepted change is published again when the runner takes it up."
        }
        table aria-labelledby="tool-changes-title" {
            thead { tr { th scope="col" { "Runner" } th scope="col" { "Tool" } th scope="col" { "Change" } th scope="col" { "Pinned digest" } th scope="col" { "Listed digest" } th scope="col" { "State" } } }
            tbody {
                @for (runner_id, state, change) in &rows {
                    tr data-tool-change=(change.tool_id) data-change-runner=(runner_id) data-state=(state) {
                        td class="mono" { (runner_id) }
                        td class="mono" { (change.tool_id) }
                        td { (change.change) }
                        td class="mono" { (digest(change.pinned.as_deref())) }
                        td class="mono" { (digest(Some(&change.listed))) }
                        td { @if *state == "pending" { "awaiting acceptance" } @else { "accepted, waiting for the runner" } }
                    }
                }
            }
        }
    }
}

/// A definition digest, shortened to 12 hex digits (the whole one in its title).
fn digest(digest: Option<&str>) -> Markup {
    match digest {
        Some(digest) => {
            let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
            html! { span title=(digest) { (hex.get(..12).unwrap_or(hex)) } }
        }
        None => html! { "–" },
    }
}
