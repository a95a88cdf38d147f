//! Runner routes: the runner stream (WIRE.md §13.1), results (§11.2), step started (§11.3),
//! tool publishing and the tool directory (§13.6, §13.7), capabilities (§13.8) and
//! unregistering (§13.9).

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, Request, State};
use axum::http::StatusCode;
use axum::response::Response;
use keel_actors::execution::StepOutcome;
use keel_actors::guardrails::budget::parse_cost;
use keel_actors::ids::{ConsumerId, ExecutionId, JobId, RunnerId, StepId, ToolId};
use keel_actors::kernel::{ToolEntry, ToolSchema};
use keel_actors::runner::JobReport;
use serde::Deserialize;
use serde_json::{Value, json};

use super::AppState;
use super::body::read_json;
use super::error::ApiError;
use super::executions::{check_length, check_required_id, path_id};
use super::query::QueryParams;
use super::sse;
use super::step_report::{NoFields, StepReport};
use crate::console::StreamRole;

#[derive(Deserialize)]
struct ResultRequest {
    job_id: Option<String>,
    execution_id: Option<String>,
    step_id: Option<String>,
    success: Option<bool>,
    data: Option<Value>,
    error: Option<String>,
    retryable: Option<bool>,
    /// What the call cost (Keel addition): an object of numbers per unit.
    cost: Option<Value>,
    started_at: Option<String>,
    completed_at: Option<String>,
    consumer_id: Option<String>,
}

#[derive(Deserialize)]
struct PublishRequest {
    tools: Option<Vec<PublishedTool>>,
}

#[derive(Deserialize)]
struct PublishedTool {
    id: Option<String>,
    description: Option<Value>,
    input_schema: Option<Value>,
}

#[derive(Deserialize)]
struct CapabilitiesRequest {
    tools: Option<Vec<String>>,
}

/// `GET /v0/runners/stream?runner_id=&consumer_id=&capabilities=a,b`: the runner's job stream.
pub async fn stream(
    State(state): State<AppState>,
    RawQuery(raw): RawQuery,
    headers: axum::http::HeaderMap,
) -> Result<Response, ApiError> {
    let query = QueryParams::parse(raw.as_deref(), &[])?;
    let (Some(runner_id), Some(consumer_id)) = (query.get("runner_id"), query.get("consumer_id"))
    else {
        return Err(ApiError::validation(
            "runner_id and consumer_id query params are required",
        ));
    };
    check_required_id("runner_id", runner_id)?;
    check_required_id("consumer_id", consumer_id)?;
    let capabilities = query
        .get("capabilities")
        .map(|list| {
            list.split(',')
                .map(str::trim)
                .filter(|item| !item.is_empty())
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let presence = state.presence.connected(
        StreamRole::Runner,
        runner_id,
        consumer_id,
        capabilities.clone(),
    );
    let pushes = state
        .kernel
        .connect_runner(
            RunnerId::new(runner_id),
            ConsumerId::new(consumer_id),
            capabilities.iter().map(ToolId::from).collect(),
        )
        .await?;
    tracing::debug!(
        runner.id = runner_id,
        consumer.id = consumer_id,
        "runner stream opened"
    );
    Ok(sse::push_response(
        &state,
        sse::StreamKind::Runner,
        pushes,
        presence,
        // Cluster mode: the runner is connected to the other kernels too, each of which
        // first gets the runner's published tools.
        crate::cluster::bridge::Bridge::for_stream(
            state.settings.cluster.as_ref(),
            "/v0/runners/stream",
            raw.as_deref(),
            &headers,
            Some(published_tools(&state, runner_id)),
        ),
    ))
}

/// The bridge prelude of a runner stream: `POST /v0/runners/{id}/tools` with the tools this
/// kernel lists for the runner when the bridge (re)opens; nothing when it lists none.
fn published_tools(state: &AppState, runner_id: &str) -> crate::cluster::bridge::Prelude {
    let kernel = state.kernel.clone();
    let runner = RunnerId::new(runner_id);
    crate::cluster::bridge::Prelude {
        path: format!("/v0/runners/{}/tools", crate::cli::path_segment(runner_id)),
        body: std::sync::Arc::new(move || {
            let tools: Vec<Value> = kernel
                .tools("")
                .into_iter()
                .filter(|tool| tool.runner_id == runner)
                .map(|tool| {
                    json!({
                        "id": tool.id,
                        "description": tool.description,
                        "input_schema": tool.input_schema,
                    })
                })
                .collect();
            if tools.is_empty() {
                return None;
            }
            serde_json::to_vec(&json!({ "tools": tools }))
                .ok()
                .map(axum::body::Bytes::from)
        }),
    }
}

/// `POST /v0/runners/{id}/results`. The runner connection named by the path id and the body's
/// `consumer_id` is freed on every path, including validation failures, except when another
/// connection holds the job: that report is refused with 409 and changes nothing.
pub async fn result(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    request: Request,
) -> Result<Json<Value>, ApiError> {
    let runner_id = runner_path_id(path)?;
    let body: ResultRequest = read_json(
        request,
        state.settings.large_body_limit,
        state.settings.body_read_timeout,
    )
    .await?;
    let consumer_id = body
        .consumer_id
        .clone()
        .filter(|id| !id.is_empty())
        .map(ConsumerId::new);
    if let Some(consumer_id) = &consumer_id {
        check_length("consumer_id", consumer_id.as_str())?;
    }
    let execution_id = body.execution_id.clone().unwrap_or_default();
    let outcome = match validate_result(&body) {
        Ok(outcome) => outcome,
        Err(error) => {
            if let Some(consumer_id) = &consumer_id {
                state.kernel.release_runner(&runner_id, consumer_id);
            }
            return Err(error);
        }
    };
    let report = JobReport {
        runner_id: runner_id.clone(),
        consumer_id: consumer_id.clone(),
        execution_id: ExecutionId::new(execution_id.clone()),
        step_id: outcome.step_id.clone(),
        job_id: body.job_id.clone().map(JobId::new),
    };
    check_holder(&state, report).await?;
    state
        .kernel
        .runner_result(
            &runner_id,
            consumer_id.as_ref(),
            &ExecutionId::new(execution_id),
            outcome,
        )
        .await?;
    Ok(Json(json!({ "status": "ok" })))
}

/// Checks a runner result (timestamps first, as the reference decodes them with the body).
fn validate_result(body: &ResultRequest) -> Result<StepOutcome, ApiError> {
    for (field, value) in [
        ("started_at", &body.started_at),
        ("completed_at", &body.completed_at),
    ] {
        if let Some(text) = value
            && chrono::DateTime::parse_from_rfc3339(text).is_err()
        {
            return Err(ApiError::validation(format_args!(
                "invalid JSON: {field} {text:?} is not an RFC 3339 time"
            )));
        }
    }
    super::text::refuse_nul_in(&[
        ("job_id", body.job_id.as_deref()),
        ("execution_id", body.execution_id.as_deref()),
        ("step_id", body.step_id.as_deref()),
    ])?;
    let present = |value: &Option<String>| value.as_deref().is_some_and(|text| !text.is_empty());
    if !present(&body.job_id) || !present(&body.execution_id) || !present(&body.step_id) {
        return Err(ApiError::validation(
            "job_id, execution_id, and step_id are required",
        ));
    }
    let cost =
        parse_cost(body.cost.as_ref().unwrap_or(&Value::Null)).map_err(ApiError::validation)?;
    Ok(StepOutcome {
        step_id: StepId::new(body.step_id.clone().unwrap_or_default()),
        success: body.success.unwrap_or(false),
        data: body.data.clone(),
        error: body.error.clone(),
        retryable: body.retryable.unwrap_or(false),
        cost,
    })
}

/// `POST /v0/runners/steps/{step_id}/started`.
pub async fn step_started(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    request: Request,
) -> Result<Json<Value>, ApiError> {
    let report: StepReport<NoFields> = super::step_report::read(&state, path, request).await?;
    let job = JobReport {
        runner_id: report.runner_id.clone(),
        consumer_id: None,
        execution_id: report.execution_id.clone(),
        step_id: report.step_id.clone(),
        job_id: None,
    };
    check_holder(&state, job).await?;
    state
        .kernel
        .step_started(&report.execution_id, &report.step_id, &report.runner_id)
        .await?;
    Ok(Json(json!({ "status": "ok" })))
}

/// `POST /v0/runners/{id}/tools`: replaces the runner's published schemas; 204.
pub async fn publish_tools(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    request: Request,
) -> Result<StatusCode, ApiError> {
    let runner_id = runner_path_id(path)?;
    let principal = super::keys::principal_of(&request);
    let body: PublishRequest = read_json(
        request,
        state.settings.body_limit,
        state.settings.body_read_timeout,
    )
    .await?;
    let mut tools = Vec::new();
    for (index, tool) in body.tools.unwrap_or_default().into_iter().enumerate() {
        let id = tool.id.unwrap_or_default();
        check_required_id(&format!("tools[{index}].id"), &id)?;
        super::auth::check_tool(&principal, &id)?;
        let input_schema = tool.input_schema.unwrap_or(Value::Null);
        check_input_schema(index, &input_schema)?;
        tools.push(ToolSchema {
            id: ToolId::new(id),
            description: tool.description.unwrap_or(Value::Null),
            input_schema,
        });
    }
    state.kernel.publish_tools(&runner_id, tools).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Refuses an `input_schema` the SDK cannot turn into a callable (WIRE.md Corrections item 3):
/// when it is an object, its `properties` must be an object and its `required` an array of
/// strings. Anything else is free-form and kept verbatim.
fn check_input_schema(index: usize, schema: &Value) -> Result<(), ApiError> {
    let Value::Object(schema) = schema else {
        return Ok(());
    };
    if let Some(properties) = schema.get("properties")
        && !properties.is_object()
    {
        return Err(ApiError::validation(format_args!(
            "tools[{index}].input_schema.properties must be an object"
        )));
    }
    if let Some(required) = schema.get("required") {
        let strings = required
            .as_array()
            .is_some_and(|items| items.iter().all(Value::is_string));
        if !strings {
            return Err(ApiError::validation(format_args!(
                "tools[{index}].input_schema.required must be an array of strings"
            )));
        }
    }
    Ok(())
}

/// `GET /v0/tools?prefix=`: the tool directory, always a JSON array.
pub async fn tools(
    State(state): State<AppState>,
    RawQuery(raw): RawQuery,
) -> Result<Json<Vec<ToolEntry>>, ApiError> {
    let query = QueryParams::parse(raw.as_deref(), &[])?;
    Ok(Json(state.kernel.tools(query.get("prefix").unwrap_or(""))))
}

/// `POST /v0/runners/{id}/capabilities`: replaces the capabilities of the runner's connections.
pub async fn capabilities(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    request: Request,
) -> Result<Json<Value>, ApiError> {
    let runner_id = runner_path_id(path)?;
    let principal = super::keys::principal_of(&request);
    let body: CapabilitiesRequest = read_json(
        request,
        state.settings.body_limit,
        state.settings.body_read_timeout,
    )
    .await?;
    for tool in body.tools.iter().flatten() {
        super::auth::check_tool(&principal, tool)?;
    }
    state
        .kernel
        .update_capabilities(
            &runner_id,
            body.tools
                .unwrap_or_default()
                .into_iter()
                .map(ToolId::new)
                .collect(),
        )
        .await?;
    Ok(Json(json!({ "status": "ok" })))
}

/// `DELETE /v0/runners/{id}`: drops the runner's schemas; 204. Never reads the body.
pub async fn unregister(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
) -> Result<StatusCode, ApiError> {
    let runner_id = runner_path_id(path)?;
    state.kernel.unregister_runner(&runner_id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Returns the runner id of the path: non-empty, at most 256 bytes.
fn runner_path_id(path: Result<Path<String>, PathRejection>) -> Result<RunnerId, ApiError> {
    let id = path_id(path)?;
    check_required_id("runner_id", &id)?;
    Ok(RunnerId::new(id))
}

/// Refuses (409, nothing recorded) a report on a job another runner connection holds.
async fn check_holder(state: &AppState, report: JobReport) -> Result<(), ApiError> {
    match state.kernel.check_job_report(report).await? {
        Ok(()) => Ok(()),
        Err(reason) => Err(ApiError::Conflict(format!("conflict: {reason}"))),
    }
}

#[cfg(test)]
#[path = "runners_tests.rs"]
mod tests;
