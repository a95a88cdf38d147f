//! The view of one execution: header, input and output, the actions the signed-in key's role
//! allows (run again, cancel, signal: operators and admins), its pending approvals with who
//! may answer them (approve/deny for a key the kernel would take the answer from,
//! `answering.rs`) and the timeline container. The script fills the timeline from the events
//! snapshot and the live stream (grouped by step, collapsed, paged) and refreshes the header
//! region when new events arrive.

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::response::Response;
use keel_actors::ids::ExecutionId;
use keel_actors::status::ExecutionStatus;
use maud::html;

use super::answering::{self, approvers_text, controls, offer};
use super::api;
use super::render::{badge, json_block, json_preview, view, when};
use super::viewer::Viewer;
use crate::http::executions::{closing_reason, path_id};
use crate::http::{ApiError, AppState};

/// `GET /console/view/executions/{id}`.
pub async fn execution(
    State(state): State<AppState>,
    viewer: Viewer,
    path: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let id = ExecutionId::new(path_id(path)?);
    let row = state.kernel.execution(&id).await?;
    let error = closing_reason(&state, &row).await?;
    let terminal = row.status.is_terminal();
    let operates = viewer.operates();
    let approvals = if row.status == ExecutionStatus::Blocked {
        api::pending_of(&state, row.id.as_str()).await?
    } else {
        Vec::new()
    };
    let creators = answering::creators(&state, &viewer, &approvals).await?;
    // Cluster mode: the kernel whose partition holds the execution (None: moving).
    let owner = state
        .settings
        .cluster
        .as_ref()
        .map(|routing| routing.owner_of_execution(row.id.as_str()));
    let markup = html! {
        div data-page="execution" data-execution-id=(row.id.as_str()) data-last-sequence=(row.last_sequence)
            data-principal=(viewer.name) data-role=(viewer.role.as_str()) data-operate[operates] {
            p { a href="/" { "← All executions" } }
            h1 { "Execution " span class="mono" { (row.id.as_str()) } }
            div id="execution-live" data-live {
                dl class="facts" {
                    dt { "Status" } dd id="execution-status" data-status=(row.status.as_str()) { (badge(row.status)) }
                    @if let Some(error) = &error {
                        dt { @if row.status == ExecutionStatus::Failed { "Error" } @else { "Reason" } }
                        dd id="execution-error" class="error-text" { (error) }
                    }
                    dt { "Agent" } dd { a href=(super::pages::list_link([("agent_id", row.agent_id.as_str())])) { (row.agent_id.as_str()) } }
                    dt { "Created" } dd { (when(&row.created_at)) }
                    dt { "Updated" } dd { (when(&row.updated_at)) }
                    dt { "Labels" } dd {
                        @if row.labels.as_ref().is_none_or(|labels| labels.is_empty()) { span class="muted" { "none" } }
                        @for (key, value) in row.labels.as_deref().into_iter().flatten() { span class="label" { (key) "=" (value) } " " }
                    }
                    dt { "Consumer" } dd class="mono" { (row.consumer_id.clone().unwrap_or_else(|| "–".into())) }
                    dt { "Events" } dd id="execution-events" data-sequence=(row.last_sequence) { (row.last_sequence) }
                    @if let Some(owner) = &owner {
                        dt { "Kernel" } dd class="mono" data-owner=(owner.as_deref().unwrap_or("")) {
                            (owner.as_deref().unwrap_or("– (moving between kernels)"))
                        }
                    }
                }
                details { summary { "Input" } (json_block(&row.input)) }
                @if let Some(output) = row.output.as_ref().filter(|_| row.status == ExecutionStatus::Completed) {
                    details open { summary { "Output" } (json_block(output)) }
                }
            }
            div id="execution-actions" data-live {
                @if operates {
                    form data-rerun data-execution-id=(row.id.as_str()) {
                        button type="submit" title="A new execution with the same agent, input and labels" { "↻ Run again" }
                    }
                    @if !terminal {
                        section class="actions" aria-labelledby="actions-title" {
                            h2 id="actions-title" { "Actions" }
                            form data-cancel data-execution-id=(row.id.as_str()) {
                                button type="submit" class="deny" { "⊘ Cancel execution" }
                            }
                            form data-signal data-execution-id=(row.id.as_str()) {
                                label for="signal-type" { "Signal type" }
                                input id="signal-type" name="signal_type" type="text" required placeholder="e.g. approve";
                                label for="signal-payload" { "Payload (JSON, optional)" }
                                textarea id="signal-payload" name="payload" rows="2" placeholder="{\"ok\": true}" {}
                                button type="submit" { "Send signal" }
                            }
                        }
                    }
                }
            }
            // Every pending approval, who may answer it, and the controls the kernel would
            // accept from this key (or why there are none).
            div id="approval-live" data-live {
                @if !approvals.is_empty() {
                    section id="approval" class="approval" aria-labelledby="approval-title" {
                        h2 id="approval-title" { "‖ Waiting for approval" }
                        @for approval in &approvals {
                            div class="pending-approval" data-step-id=(approval.step_id) {
                                p data-what {
                                    "Tool " span class="mono" { (approval.tool_id) }
                                    " with arguments " span class="mono" { (json_preview(&approval.arguments, 200)) }
                                    " — policy: " (approval.reason)
                                }
                                p data-approvers { "Who may answer: " (approvers_text(approval.approvers.as_ref())) }
                                (controls(offer(&viewer, approval, &creators), approval))
                            }
                        }
                    }
                }
            }
            section class="timeline" aria-labelledby="timeline-title" {
                h2 id="timeline-title" { "Timeline" }
                p id="timeline-summary" class="muted" aria-live="polite" { "Loading events…" }
                p { button type="button" id="timeline-earlier" hidden { "Show earlier entries" } }
                ol id="timeline" {}
                p id="timeline-live" class="muted" {}
            }
        }
    };
    Ok(view(markup))
}
