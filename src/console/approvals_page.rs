//! The approvals inbox: every pending approval across executions, oldest first, with the
//! approve/deny controls for the approvals the signed-in key may answer (`answering.rs`).

use axum::extract::{RawQuery, State};
use axum::response::Response;
use maud::html;

use super::answering::{self, approvers_text, controls, offer};
use super::api;
use super::render::{json_block, json_preview, view};
use super::viewer::Viewer;
use crate::http::query::QueryParams;
use crate::http::{ApiError, AppState};

/// `GET /console/view/approvals`.
pub async fn approvals(
    State(state): State<AppState>,
    viewer: Viewer,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let query = QueryParams::parse(raw.as_deref(), &[])?;
    let approvals = api::pending(&state, &query).await?;
    let creators = answering::creators(&state, &viewer, &approvals).await?;
    let answers = viewer.answers();
    let columns = if answers { 8 } else { 7 };
    let markup = html! {
        div data-page="approvals" data-live-interval="2000" data-principal=(viewer.name) data-role=(viewer.role.as_str()) {
            h1 { "Approvals" }
            p class="muted" {
                "Tool calls waiting for a human decision, oldest first. "
                @if answers { "Approving runs the tool; denying fails the step with your reason." }
                @else { "This key's role (" (viewer.role.as_str()) ") does not answer approvals." }
            }
            div id="approvals-live" data-live {
                table class="approvals" {
                    caption { (approvals.len()) " waiting" }
                    thead { tr {
                        th scope="col" { "Requested" } th scope="col" { "Execution" } th scope="col" { "Agent" }
                        th scope="col" { "Tool" } th scope="col" { "Arguments" } th scope="col" { "Policy reason" }
                        th scope="col" { "Who may answer" }
                        @if answers { th scope="col" { "Decision" } }
                    } }
                    tbody {
                        @if approvals.is_empty() {
                            tr { td colspan=(columns) class="muted" { "Nothing is waiting for approval." } }
                        }
                        @for approval in &approvals {
                            tr data-step-id=(approval.step_id) {
                                td { time datetime=(approval.requested_at) { (approval.requested_at) } }
                                td { a class="mono" href={ "/executions/" (approval.execution_id) } { (approval.execution_id) } }
                                td { (approval.agent_id) }
                                td { span class="mono" { (approval.tool_id) } @if approval.remote { " (remote)" } }
                                td { details { summary { (json_preview(&approval.arguments, 60)) } (json_block(&approval.arguments)) } }
                                td { (approval.reason) }
                                td data-approvers {
                                    (approvers_text(approval.approvers.as_ref()))
                                    @if let Some(first) = &approval.escalated_from {
                                        br; span class="muted small" data-escalated-from {
                                            "escalated; first asked of " (approvers_text(first.get("approvers")))
                                        }
                                    }
                                }
                                @if answers {
                                    td { (controls(offer(&viewer, approval, &creators), approval)) }
                                }
                            }
                        }
                    }
                }
            }
        }
    };
    Ok(view(markup))
}
