//! The views of the list pages: executions and health (the approvals inbox is in
//! `approvals_page.rs`, the directory in `directory_page.rs`). Each is server-rendered from the kernel's reads; regions marked
//! `data-live` are refreshed in place by the script while the page is open.

use axum::extract::{RawQuery, State};
use axum::response::Response;
use keel_actors::time;
use maud::{Markup, html};

use super::StreamRole;
use super::api::{self, STATUSES};
use super::render::{badge, view, when};
use super::viewer::Viewer;
use crate::http::executions::{closing_reason, list_page};
use crate::http::query::QueryParams;
use crate::http::{ApiError, AppState};

/// Query keys of the executions page carried from one page to the next.
const LIST_KEYS: [&str; 6] = [
    "status",
    "agent_id",
    "label",
    "created_after",
    "created_before",
    "limit",
];

/// Builds `/` with `pairs` as its query.
pub(super) fn list_link<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let mut serializer = url::form_urlencoded::Serializer::new(String::new());
    for (key, value) in pairs {
        serializer.append_pair(key, value);
    }
    let query = serializer.finish();
    if query.is_empty() {
        "/".to_owned()
    } else {
        format!("/?{query}")
    }
}

/// Accepts the `datetime-local` form (`2026-05-21T14:20[:38]`, read as UTC) besides RFC 3339.
fn normalize_time(text: &str) -> String {
    if chrono::DateTime::parse_from_rfc3339(text).is_ok() {
        return text.to_owned();
    }
    for format in ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S"] {
        if let Ok(naive) = chrono::NaiveDateTime::parse_from_str(text, format) {
            return time::format(&naive.and_utc());
        }
    }
    text.to_owned()
}

/// The page's filters, times normalised, as `(key, value)` pairs (cursor excluded).
fn filters(query: &QueryParams) -> Vec<(&'static str, String)> {
    let mut pairs = Vec::new();
    for key in LIST_KEYS {
        for value in query.all(key).into_iter().filter(|value| !value.is_empty()) {
            let value = if key.starts_with("created_") {
                normalize_time(value)
            } else {
                value.to_owned()
            };
            pairs.push((key, value));
        }
    }
    pairs
}

/// `GET /console/view/executions`: counts, filters and one page of executions.
pub async fn executions(
    State(state): State<AppState>,
    viewer: Viewer,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let query = QueryParams::parse(raw.as_deref(), &["label"])?;
    let filters = filters(&query);
    let cursor = query.get("cursor");
    let mut pairs: Vec<(&str, &str)> = filters
        .iter()
        .map(|(key, value)| (*key, value.as_str()))
        .collect();
    pairs.extend(cursor.map(|cursor| ("cursor", cursor)));
    let raw = list_link(pairs);
    let normalized = QueryParams::parse(raw.strip_prefix("/?"), &["label"])?;
    let (rows, next_cursor) = list_page(&state, &normalized).await?;
    let mut errors = Vec::with_capacity(rows.len());
    for row in &rows {
        errors.push(closing_reason(&state, row).await?);
    }
    let counts = api::count(&state, &normalized).await?;
    let total: u64 = counts.values().sum();
    let without = |skip: &str| {
        filters
            .iter()
            .filter(|(key, _)| *key != skip)
            .map(|(key, value)| (*key, value.as_str()))
            .collect::<Vec<_>>()
    };
    let status = query.get("status").unwrap_or_default();
    let label = query.all("label").first().copied().unwrap_or_default();
    let markup = html! {
        div data-page="executions" data-live-interval="2000" data-principal=(viewer.name) data-role=(viewer.role.as_str()) {
            h1 { "Executions" }
            form class="filters" method="get" action="/" aria-label="Filter executions" {
                label { "Status " select name="status" {
                    option value="" selected[status.is_empty()] { "any" }
                    @for state_ in STATUSES {
                        option value=(state_.as_str()) selected[status == state_.as_str()] { (state_.as_str()) }
                    }
                } }
                label { "Agent " input type="text" name="agent_id" value=(query.get("agent_id").unwrap_or_default()) placeholder="agent id"; }
                label { "Label " input type="text" name="label" value=(label) placeholder="key=value"; }
                label { "Created after (UTC) " input type="datetime-local" step="1" name="created_after" value=(query.get("created_after").unwrap_or_default()); }
                label { "Created before (UTC) " input type="datetime-local" step="1" name="created_before" value=(query.get("created_before").unwrap_or_default()); }
                button type="submit" { "Apply filters" }
                a href="/" { "Reset" }
            }
            div id="executions-live" data-live {
                nav aria-label="Counts by status" class="counts" {
                    ul {
                        li { a href=(list_link(without("status"))) aria-current=[status.is_empty().then_some("true")] {
                            "all " span class="count" { (total) }
                        } }
                        @for state_ in STATUSES {
                            @let mut pairs = without("status");
                            @let name = state_.as_str();
                            li { a href=(list_link({ pairs.push(("status", name)); pairs })) aria-current=[(status == name).then_some("true")] {
                                (badge(state_)) " " span class="count" data-count=(name) { (counts.get(name).copied().unwrap_or(0)) }
                            } }
                        }
                    }
                }
                (execution_table(&rows, &errors))
                nav aria-label="Pages" class="pager" {
                    @if cursor.is_some() {
                        a href=(list_link(without(""))) { "← First page" }
                    }
                    @if !next_cursor.is_empty() {
                        @let mut pairs = without("");
                        a href=(list_link({ pairs.push(("cursor", next_cursor.as_str())); pairs })) rel="next" { "Next page →" }
                    }
                }
            }
        }
    };
    Ok(view(markup))
}

fn execution_table(rows: &[keel_actors::store::ExecutionRow], errors: &[Option<String>]) -> Markup {
    html! {
        table class="executions" {
            caption { "Newest first; " (rows.len()) " on this page" }
            thead { tr {
                th scope="col" { "Status" } th scope="col" { "Execution" } th scope="col" { "Agent" }
                th scope="col" { "Labels" } th scope="col" { "Created" } th scope="col" { "Updated" }
            } }
            tbody {
                @if rows.is_empty() {
                    tr { td colspan="6" class="muted" { "No executions match." } }
                }
                @for (row, error) in rows.iter().zip(errors) {
                    tr data-execution-id=(row.id.as_str()) data-status=(row.status.as_str()) {
                        td {
                            (badge(row.status))
                            @if let Some(error) = error { br; span class="error-text small" data-error { (error) } }
                        }
                        td { a class="mono" href={ "/executions/" (row.id.as_str()) } { (row.id.as_str()) } }
                        td { (row.agent_id.as_str()) }
                        td { @for (key, value) in row.labels.as_deref().into_iter().flatten() { span class="label" { (key) "=" (value) } " " } }
                        td { (when(&row.created_at)) }
                        td { (when(&row.updated_at)) }
                    }
                }
            }
        }
    }
}

/// `GET /console/view/status`: health numbers and the policy in force.
pub async fn status(State(state): State<AppState>, viewer: Viewer) -> Result<Response, ApiError> {
    let ready = state.kernel.ready().await;
    let counts = api::count(&state, &QueryParams::default()).await?;
    let agents = state.presence.list(StreamRole::Agent);
    let runners = state.presence.list(StreamRole::Runner);
    let consumers = |list: &[(String, Vec<super::Connection>)]| {
        list.iter().map(|(_, c)| c.len()).sum::<usize>()
    };
    let approvals = state.kernel.pending_approvals(1000).await?.len();
    let policy = state.policy.snapshot();
    let cluster = state
        .settings
        .cluster
        .as_ref()
        .map(|routing| routing.view());
    let markup = html! {
        div data-page="status" data-live-interval="3000" data-principal=(viewer.name) data-role=(viewer.role.as_str()) {
            h1 { "Health" }
            div id="status-live" data-live {
                dl class="facts" {
                    dt { "Kernel" } dd { "keel " (env!("CARGO_PKG_VERSION")) }
                    dt { "Serving" } dd { span class="badge s-completed" { span aria-hidden="true" { "✔" } " ok" } }
                    dt { "Store" } dd {
                        @match &ready {
                            Ok(()) => span class="badge s-completed" data-ready="ready" { span aria-hidden="true" { "✔" } " ready" },
                            Err(error) => span class="badge s-failed" data-ready="unavailable" { span aria-hidden="true" { "✖" } " unavailable: " (error.to_string()) },
                        }
                    }
                    dt { "Agents connected" } dd { (agents.len()) " agents, " (consumers(&agents)) " consumers" }
                    dt { "Runners connected" } dd { (runners.len()) " runners, " (consumers(&runners)) " consumers" }
                    dt { "Approvals waiting" } dd { a href="/approvals" { (if approvals >= 1000 { "1000+".to_owned() } else { approvals.to_string() }) } }
                }
                @if let Some(cluster) = &cluster {
                    h2 id="cluster-title" { "Cluster" }
                    p class="muted" {
                        "This kernel: " span class="mono" { (cluster.node_id) } ". "
                        (cluster.partitions) " partitions"
                        @if cluster.unowned > 0 { ", " (cluster.unowned) " moving between kernels" }
                        "."
                    }
                    table aria-labelledby="cluster-title" data-cluster {
                        thead { tr { th scope="col" { "Kernel" } th scope="col" { "URL" } th scope="col" { "State" } th scope="col" { "Partitions" } } }
                        tbody {
                            @for kernel in &cluster.kernels {
                                tr data-kernel=(kernel.id) {
                                    td class="mono" { (kernel.id) @if kernel.this { " (this one)" } }
                                    td class="mono" { (kernel.url) }
                                    td { @if kernel.live { span class="badge s-completed" { span aria-hidden="true" { "✔" } " live" } } @else { span class="badge s-failed" { span aria-hidden="true" { "✖" } " gone" } } }
                                    td class="num" data-partitions=(kernel.partitions_owned) { (kernel.partitions_owned) }
                                }
                            }
                        }
                    }
                }
                h2 id="counts-title" { "Executions by status" }
                table aria-labelledby="counts-title" class="narrow" {
                    thead { tr { th scope="col" { "Status" } th scope="col" { "Executions" } } }
                    tbody {
                        @for state_ in STATUSES {
                            tr { td { (badge(state_)) } td class="num" data-count=(state_.as_str()) { a href={ "/?status=" (state_.as_str()) } { (counts.get(state_.as_str()).copied().unwrap_or(0)) } } }
                        }
                    }
                }
                h2 { "Policy" }
                dl class="facts" {
                    dt { "Source" } dd { (policy.source.clone().unwrap_or_else(|| "built-in default (no --policy)".to_owned())) }
                    dt { "Digest" } dd class="mono" data-digest=(policy.digest) { (policy.digest) }
                    dt { "Loaded" } dd { (when(&policy.loaded_at)) }
                    dt { "Rules" } dd {
                        @if policy.rules.is_empty() { span class="muted" { "none" } }
                        @else { (policy.rules.len()) ": " @for rule in &policy.rules { span class="label mono" { (rule) } " " } }
                    }
                    dt { "Last reload" } dd {
                        @match &policy.last_reload {
                            None => span class="muted" { "no reload since start" },
                            Some(outcome) => {
                                @if outcome.result == "error" {
                                    span class="badge s-failed" { span aria-hidden="true" { "✖" } " error" }
                                } @else {
                                    span class="badge s-completed" { span aria-hidden="true" { "✔" } " " (outcome.result) }
                                }
                                " at " (when(&outcome.at))
                                @if !outcome.problems.is_empty() {
                                    ul class="problems" { @for problem in &outcome.problems { li { (problem) } } }
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
