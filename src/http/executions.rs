//! Execution routes (WIRE.md §7.1–7.6): create, get, cancel, signal and the events snapshot.
//! Listing (§7.2) is in `execution_list.rs`; the live stream (§7.7) is in [`super::sse`].

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, Request, State};
use axum::http::StatusCode;
use axum::response::Response;
use keel_actors::events::EventBody;
use keel_actors::ids::{self, AgentId, ExecutionId};
use keel_actors::status::ExecutionStatus;
use keel_actors::store::ExecutionRow;
use keel_actors::time;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::AppState;
use super::body::read_json;
use super::creation;
use super::error::ApiError;
use super::query::QueryParams;

pub use super::execution_list::list;
pub(crate) use super::execution_list::{list_filter, list_page};

const DEFAULT_EVENTS_LIMIT: i64 = 100;
const MAX_EVENTS_LIMIT: i64 = 1000;

/// The Execution object of WIRE.md §6.
#[derive(Serialize)]
pub struct ExecutionBody {
    id: String,
    status: ExecutionStatus,
    agent_id: String,
    labels: Option<BTreeMap<String, String>>,
    input: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    output: Option<Value>,
    /// On creation, when no consumer of the agent is connected: says so, and whether one ever
    /// was since the kernel started (Keel addition).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) notice: Option<String>,
    /// Why a failed execution failed or a cancelled one was cancelled (Keel addition; the
    /// rebuno SDK ignores fields it does not know).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<String>,
    created_at: String,
    updated_at: String,
    /// Budget limits, usage and what remains (Keel addition; only with a budget in force).
    #[serde(skip_serializing_if = "Option::is_none")]
    budget: Option<Value>,
}

impl From<ExecutionRow> for ExecutionBody {
    fn from(row: ExecutionRow) -> Self {
        let output = match row.status {
            ExecutionStatus::Completed => row.output.filter(|output| !output.is_null()),
            _ => None,
        };
        Self {
            id: row.id.into_string(),
            status: row.status,
            agent_id: row.agent_id.into_string(),
            labels: row.labels.map(Arc::unwrap_or_clone),
            input: Arc::unwrap_or_clone(row.input),
            output,
            notice: None,
            error: None,
            created_at: time::format(&row.created_at),
            updated_at: time::format(&row.updated_at),
            budget: None,
        }
    }
}

#[derive(Deserialize)]
struct CreateRequest {
    agent_id: Option<String>,
    input: Option<Value>,
    labels: Option<Value>,
    priority: Option<Value>,
    on_behalf_of: Option<Value>,
}

#[derive(Deserialize)]
struct SignalRequest {
    signal_type: Option<String>,
    payload: Option<Value>,
}

/// Returns the path's id, mapping axum's rejection into the envelope.
pub fn path_id(path: Result<Path<String>, PathRejection>) -> Result<String, ApiError> {
    path.map(|Path(id)| id)
        .map_err(|rejection| ApiError::validation(rejection.body_text()))
}

/// Returns a 400 unless `value` fits [`ids::MAX_CLIENT_ID_BYTES`] (it may be empty).
pub fn check_length(field: &str, value: &str) -> Result<(), ApiError> {
    ids::check_length(value).map_err(|problem| id_error(field, problem))
}

/// Returns a 400 unless `value` is a non-empty id of at most [`ids::MAX_CLIENT_ID_BYTES`].
pub fn check_required_id(field: &str, value: &str) -> Result<(), ApiError> {
    ids::check_required(value).map_err(|problem| id_error(field, problem))
}

fn id_error(field: &str, problem: ids::IdProblem) -> ApiError {
    ApiError::validation(format_args!("{field} {problem}"))
}

/// `POST /v0/executions`: 201 with the new execution, or 200 with the execution an earlier
/// request with the same `Idempotency-Key` created (409 when its body differed).
pub async fn create(
    State(state): State<AppState>,
    request: Request,
) -> Result<(StatusCode, Json<ExecutionBody>), ApiError> {
    let key = creation::idempotency_key(request.headers())?;
    let principal = request
        .extensions()
        .get::<crate::auth::Principal>()
        .cloned();
    let body: CreateRequest = read_json(
        request,
        state.settings.body_limit,
        state.settings.body_read_timeout,
    )
    .await?;
    let agent_id = body.agent_id.unwrap_or_default();
    check_length("agent_id", &agent_id)?;
    if agent_id.is_empty() {
        return Err(ApiError::validation("agent_id is required"));
    }
    super::request_id::record("agent.id", &agent_id);
    let labels = super::text::parse_labels(body.labels, state.settings.labels)?;
    let creator = principal
        .clone()
        .unwrap_or_else(crate::auth::Principal::anonymous);
    super::auth::check_creation(&creator, &agent_id, labels.as_ref())?;
    let on_behalf_of = parse_on_behalf_of(body.on_behalf_of)?;
    let priority = creation::parse_priority(body.priority)?;
    let input = body.input.unwrap_or(Value::Null);
    let request = creation::Request {
        agent_id: AgentId::new(agent_id),
        input,
        labels,
        priority,
        created_by: principal.and_then(|principal| principal.recorded_name()),
        on_behalf_of,
        id: match &state.settings.cluster {
            Some(routing) => Some(routing.new_execution_id().ok_or_else(|| {
                ApiError::Unavailable(
                    "this kernel holds no partition yet; retry (any kernel of the cluster)"
                        .to_owned(),
                )
            })?),
            None => None,
        },
    };
    let backlog = &state.settings.backlog;
    if backlog.strict_agents {
        refuse_unknown_agent(&state, &request.agent_id).await?;
    }
    let Some(key) = key else {
        backlog.admit(&state.kernel, &request.agent_id).await?;
        let row = creation::create(&state.kernel, request, None).await?;
        super::request_id::record("execution.id", row.id.as_str());
        return Ok((StatusCode::CREATED, Json(with_notice(&state, row))));
    };
    match creation::create_once(&state.kernel, backlog, request, key).await? {
        (row, true) => Ok((StatusCode::CREATED, Json(with_notice(&state, row)))),
        (row, false) => Ok((StatusCode::OK, Json(with_notice(&state, row)))),
    }
}

/// `--strict-agents`: refuses an agent id that no policy file names, no consumer has connected
/// as since the kernel started, and no stored execution has (a typo'd id would otherwise wait
/// for its whole timeout).
async fn refuse_unknown_agent(state: &AppState, agent_id: &AgentId) -> Result<(), ApiError> {
    let (_, ever) = state
        .presence
        .consumers_of(crate::console::StreamRole::Agent, agent_id.as_str());
    if ever || state.kernel.knows_agent(agent_id).await? {
        return Ok(());
    }
    Err(ApiError::validation(format!(
        "unknown agent_id {agent_id}: no policy file names it, no consumer of it has connected \
         and no execution has it (the kernel runs with --strict-agents)"
    )))
}

/// The body of a creation answer: the execution, with a notice while no consumer of its agent
/// is connected to this kernel (the execution waits for one until its timeout).
fn with_notice(state: &AppState, row: ExecutionRow) -> ExecutionBody {
    let waiting = row.status == ExecutionStatus::Pending;
    let (connected, ever) = state
        .presence
        .consumers_of(crate::console::StreamRole::Agent, row.agent_id.as_str());
    let notice = (waiting && connected == 0).then(|| {
        let agent = row.agent_id.as_str();
        if ever {
            format!("no consumer of agent {agent} is connected now (one was earlier); the execution waits for one")
        } else {
            format!("no consumer of agent {agent} has connected since the kernel started; the execution waits for one")
        }
    });
    let mut body = ExecutionBody::from(row);
    body.notice = notice;
    body
}

/// `on_behalf_of`: a plain string of 1 to 256 bytes without control characters (an end user's
/// id, recorded as given), or absent.
fn parse_on_behalf_of(value: Option<Value>) -> Result<Option<String>, ApiError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text))
            if !text.is_empty() && text.len() <= 256 && !text.chars().any(char::is_control) =>
        {
            Ok(Some(text))
        }
        Some(_) => Err(ApiError::validation(
            "on_behalf_of must be a string of 1 to 256 bytes without control characters",
        )),
    }
}

/// `GET /v0/executions/{id}`.
pub async fn get(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<ExecutionBody>, ApiError> {
    let id = ExecutionId::new(path_id(path)?);
    let row = state.kernel.execution(&id).await?;
    let budget = state.kernel.execution_budget(&row).await?;
    let error = closing_reason(&state, &row).await?;
    let mut body = ExecutionBody::from(row);
    body.budget = budget;
    body.error = error;
    Ok(Json(body))
}

/// How many of an execution's last events are searched for its terminal event (events that
/// follow it, such as a step cancelled with the execution, are few).
const CLOSING_EVENTS: i64 = 16;

/// Returns the error of a failed execution or the reason of a cancelled one, read from its
/// terminal event (`None` for any other status, or a cancellation without a reason).
pub(crate) async fn closing_reason(
    state: &AppState,
    row: &ExecutionRow,
) -> Result<Option<String>, ApiError> {
    if !matches!(
        row.status,
        ExecutionStatus::Failed | ExecutionStatus::Cancelled
    ) {
        return Ok(None);
    }
    let after = (row.last_sequence - CLOSING_EVENTS).max(0);
    let events = state.kernel.events(&row.id, after, CLOSING_EVENTS).await?;
    Ok(events.iter().rev().find_map(|event| match &event.body {
        EventBody::ExecutionFailed { error } => Some(error.clone()),
        EventBody::ExecutionCancelled { reason } if !reason.is_empty() => Some(reason.clone()),
        _ => None,
    }))
}

/// `POST /v0/executions/{id}/cancel`; never reads the body.
pub async fn cancel(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    headers: axum::http::HeaderMap,
) -> Result<Json<ExecutionBody>, ApiError> {
    super::cross_site::require_json(&headers)?;
    let id = ExecutionId::new(path_id(path)?);
    let row = state.kernel.cancel(&id).await?;
    Ok(Json(row.into()))
}

/// `POST /v0/executions/{id}/signal`.
pub async fn signal(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    request: Request,
) -> Result<Json<Value>, ApiError> {
    let id = ExecutionId::new(path_id(path)?);
    let principal = super::keys::principal_of(&request);
    let body: SignalRequest = read_json(
        request,
        state.settings.body_limit,
        state.settings.body_read_timeout,
    )
    .await?;
    let signal_type = body.signal_type.unwrap_or_default();
    if signal_type.is_empty() {
        return Err(ApiError::validation("signal_type is required"));
    }
    check_length("signal_type", &signal_type)?;
    super::auth::check_signal(&principal, &signal_type)?;
    let mut payload = body.payload.unwrap_or(Value::Null);
    if signal_type == "step.approve" {
        // The same checks as the approvals API: not the execution's creator; who answered.
        let step_id = payload
            .get("step_id")
            .and_then(Value::as_str)
            .map(str::to_owned);
        super::approvals::check_answerer(&state, &principal, &id, step_id.as_deref()).await?;
        payload = super::approvals::with_answerer(payload, &principal);
    }
    state
        .kernel
        .signal_from(&id, signal_type, payload, principal.recorded_name())
        .await?;
    Ok(Json(json!({ "status": "ok" })))
}

/// `GET /v0/executions/{id}/events`: one page of the log; unknown executions give an empty page.
/// The page ends early at `--max-page-bytes`; `latest_sequence` is where the next one starts.
pub async fn events(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let id = ExecutionId::new(path_id(path)?);
    let query = QueryParams::parse(raw.as_deref(), &[])?;
    let after_sequence = query.non_negative("after_sequence", 0);
    let limit = match query.non_negative("limit", DEFAULT_EVENTS_LIMIT) {
        0 => DEFAULT_EVENTS_LIMIT,
        limit => limit.min(MAX_EVENTS_LIMIT),
    };
    super::page_bytes::execution_events(&state, &id, after_sequence, limit).await
}

#[cfg(test)]
#[path = "executions_tests.rs"]
mod tests;
