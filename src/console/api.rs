//! Read endpoints for operators (documented in docs/console.md, all additive to WIRE.md and
//! authenticated like every `/v0` route): pending approvals, execution counts, the connected
//! agents and runners, and the policy in force.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{RawQuery, State};
use keel_actors::status::ExecutionStatus;
use keel_actors::store::PendingApproval;
use keel_actors::time;
use serde::Serialize;
use serde_json::{Value, json};

use super::presence::{Connection, StreamRole};
use crate::http::executions::list_filter;
use crate::http::query::QueryParams;
use crate::http::{ApiError, AppState};
use crate::policy::PolicySnapshot;
use keel_actors::ids::AgentId;

/// Default and largest page of `GET /v0/approvals`.
pub const DEFAULT_APPROVALS: i64 = 100;
const MAX_APPROVALS: i64 = 1000;

/// Every status, in lifecycle order (the keys of the counts object).
pub const STATUSES: [ExecutionStatus; 6] = [
    ExecutionStatus::Pending,
    ExecutionStatus::Running,
    ExecutionStatus::Blocked,
    ExecutionStatus::Completed,
    ExecutionStatus::Failed,
    ExecutionStatus::Cancelled,
];

/// One entry of `GET /v0/approvals`.
#[derive(Serialize)]
pub struct ApprovalBody {
    /// `<execution id>.<step id>`: what `POST /v0/approvals/{id}` takes.
    pub id: String,
    pub execution_id: String,
    pub agent_id: String,
    pub step_id: String,
    pub tool_id: String,
    pub arguments: Value,
    pub remote: bool,
    pub reason: String,
    /// Rule that asked (absent for approvals requested before Keel recorded it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule_id: Option<String>,
    /// `sha256:<hex>` of the arguments: the approval is for exactly these.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arguments_digest: Option<String>,
    /// Who may answer now (`roles`, `keys`; after an escalation, the escalation's); absent:
    /// any key that answers approvals.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approvers: Option<Value>,
    /// When it expires, and what expiry does (`deny`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_expiry: Option<String>,
    /// Whether the execution's creator may answer.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub self_approval: bool,
    /// Whether the first approvers let it expire and it was asked of the escalation's.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub escalated: bool,
    /// After an escalation, the first round's terms (`approvers`, `expires_at`, `on_expiry`):
    /// history, they may no longer answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub escalated_from: Option<Value>,
    pub requested_at: String,
}

impl From<PendingApproval> for ApprovalBody {
    fn from(approval: PendingApproval) -> Self {
        let field = |name: &str| approval.request.get(name).cloned().unwrap_or(Value::Null);
        let text = |name: &str| field(name).as_str().unwrap_or_default().to_owned();
        // The terms in force: the escalation's once the first round expired.
        let escalation = approval
            .latest_request
            .as_ref()
            .filter(|latest| latest["escalated"].as_bool() == Some(true));
        let terms = escalation.unwrap_or(&approval.request);
        let term = |name: &str| terms.get(name).and_then(Value::as_str).map(str::to_owned);
        let escalated_from = escalation.map(|_| {
            let mut first = serde_json::Map::new();
            for name in ["approvers", "expires_at", "on_expiry"] {
                if let Some(value) = approval.request.get(name) {
                    first.insert(name.to_owned(), value.clone());
                }
            }
            Value::Object(first)
        });
        Self {
            id: format!("{}.{}", approval.execution_id, approval.step_id),
            tool_id: text("tool_id"),
            reason: text("reason"),
            arguments: field("arguments"),
            remote: field("remote").as_bool().unwrap_or(false),
            rule_id: field("rule_id").as_str().map(str::to_owned),
            arguments_digest: field("arguments_digest").as_str().map(str::to_owned),
            approvers: terms.get("approvers").cloned(),
            expires_at: term("expires_at"),
            on_expiry: term("on_expiry"),
            escalated: escalated_from.is_some(),
            escalated_from,
            self_approval: field("self_approval").as_bool().unwrap_or(false),
            execution_id: approval.execution_id.into_string(),
            agent_id: approval.agent_id.into_string(),
            step_id: approval.step_id.into_string(),
            requested_at: time::format(&approval.requested_at),
        }
    }
}

/// Reads up to `limit` pending approvals (the default when absent or 0, at most 1000).
pub async fn pending(state: &AppState, query: &QueryParams) -> Result<Vec<ApprovalBody>, ApiError> {
    let limit = match query.non_negative("limit", DEFAULT_APPROVALS) {
        0 => DEFAULT_APPROVALS,
        limit => limit.min(MAX_APPROVALS),
    };
    let approvals = state.kernel.pending_approvals(limit).await?;
    Ok(approvals.into_iter().map(ApprovalBody::from).collect())
}

/// The pending approvals of one execution (among the kernel's oldest 1000).
pub async fn pending_of(state: &AppState, id: &str) -> Result<Vec<ApprovalBody>, ApiError> {
    let approvals = state.kernel.pending_approvals(MAX_APPROVALS).await?;
    Ok(approvals
        .into_iter()
        .filter(|approval| approval.execution_id.as_str() == id)
        .map(ApprovalBody::from)
        .collect())
}

/// `GET /v0/approvals?limit=`: approvals nobody answered yet, oldest first.
pub async fn approvals(
    State(state): State<AppState>,
    RawQuery(raw): RawQuery,
) -> Result<Json<Value>, ApiError> {
    let query = QueryParams::parse(raw.as_deref(), &[])?;
    let approvals = pending(&state, &query).await?;
    Ok(Json(json!({ "approvals": approvals })))
}

/// Counts by status for the query's `agent_id` and `label` filters (every status present).
pub async fn count(
    state: &AppState,
    query: &QueryParams,
) -> Result<BTreeMap<&'static str, u64>, ApiError> {
    let filter = list_filter(query)?;
    let found = state.kernel.count_executions(&filter).await?;
    let mut counts: BTreeMap<&'static str, u64> =
        STATUSES.iter().map(|status| (status.as_str(), 0)).collect();
    for (status, count) in found {
        counts.insert(status.as_str(), count);
    }
    Ok(counts)
}

/// `GET /v0/executions/counts?agent_id=&label=`: executions by status.
pub async fn counts(
    State(state): State<AppState>,
    RawQuery(raw): RawQuery,
) -> Result<Json<Value>, ApiError> {
    let query = QueryParams::parse(raw.as_deref(), &["label"])?;
    let counts = count(&state, &query).await?;
    let total: u64 = counts.values().sum();
    Ok(Json(json!({ "counts": counts, "total": total })))
}

/// One agent of `GET /v0/agents`.
#[derive(Serialize)]
pub struct AgentBody {
    pub agent_id: String,
    pub consumers: Vec<Connection>,
    pub pending: u64,
}

/// The connected agents with their pending backlog.
pub async fn agent_list(state: &AppState) -> Result<Vec<AgentBody>, ApiError> {
    let mut agents = Vec::new();
    for (agent_id, consumers) in state.presence.list(StreamRole::Agent) {
        let pending = state
            .kernel
            .pending_count(Some(&AgentId::from(&agent_id)))
            .await?;
        agents.push(AgentBody {
            agent_id,
            consumers,
            pending,
        });
    }
    Ok(agents)
}

/// `GET /v0/agents`: agents with an open stream, their consumers and pending executions.
pub async fn agents(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    Ok(Json(json!({ "agents": agent_list(&state).await? })))
}

/// One runner of `GET /v0/runners`.
#[derive(Serialize)]
pub struct RunnerBody {
    pub runner_id: String,
    pub consumers: Vec<Connection>,
    pub tools: Vec<String>,
}

/// The connected runners with the tools they published.
pub fn runner_list(state: &AppState) -> Vec<RunnerBody> {
    let tools = state.kernel.tools("");
    state
        .presence
        .list(StreamRole::Runner)
        .into_iter()
        .map(|(runner_id, consumers)| RunnerBody {
            tools: tools
                .iter()
                .filter(|tool| tool.runner_id == runner_id)
                .map(|tool| tool.id.to_string())
                .collect(),
            runner_id,
            consumers,
        })
        .collect()
}

/// `GET /v0/runners`: runners with an open stream, their consumers and published tools.
pub async fn runners(State(state): State<AppState>) -> Json<Value> {
    Json(json!({ "runners": runner_list(&state) }))
}

/// `GET /v0/policy`: source, digest and rule ids of the policy in force, last reload outcome.
pub async fn policy(State(state): State<AppState>) -> Json<PolicySnapshot> {
    Json(state.policy.snapshot())
}
