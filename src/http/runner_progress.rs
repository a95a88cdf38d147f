//! `POST /v0/runners/steps/{step_id}/progress` (Keel addition, docs/mcp.md "Progress"): a
//! runner relays the progress a running tool reported. Recorded as `step.progress` while the
//! step runs on that runner, at most `MAX_PROGRESS_EVENTS` per step (the message cut to
//! `MAX_PROGRESS_MESSAGE_BYTES`); otherwise accepted and dropped.

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request, State};
use keel_actors::execution::machine::Progress;
use keel_actors::ids::{ExecutionId, RunnerId, StepId};
use serde::Deserialize;
use serde_json::{Value, json};

use super::AppState;
use super::body::read_json;
use super::error::ApiError;
use super::executions::{check_length, path_id};

#[derive(Deserialize)]
struct ProgressRequest {
    execution_id: Option<String>,
    runner_id: Option<String>,
    progress: Option<f64>,
    total: Option<f64>,
    message: Option<String>,
}

/// `POST /v0/runners/steps/{step_id}/progress`.
pub async fn step_progress(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    request: Request,
) -> Result<Json<Value>, ApiError> {
    let step_id = StepId::new(path_id(path)?);
    let principal = super::keys::principal_of(&request);
    let body: ProgressRequest = read_json(
        request,
        state.settings.body_limit,
        state.settings.body_read_timeout,
    )
    .await?;
    let execution_id = body.execution_id.unwrap_or_default();
    let runner_id = body.runner_id.unwrap_or_default();
    if execution_id.is_empty() || runner_id.is_empty() {
        return Err(ApiError::validation(
            "execution_id and runner_id are required",
        ));
    }
    let Some(progress) = body.progress else {
        return Err(ApiError::validation("progress (a number) is required"));
    };
    check_length("runner_id", &runner_id)?;
    super::text::refuse_nul("execution_id", &execution_id)?;
    if let Some(message) = &body.message {
        super::text::refuse_nul("message", message)?;
    }
    super::auth::check_runner(&principal, &runner_id)?;
    let report = Progress {
        progress,
        total: body.total,
        message: body.message,
    };
    state
        .kernel
        .step_progress(
            &ExecutionId::new(execution_id),
            &step_id,
            &RunnerId::new(runner_id),
            report,
        )
        .await?;
    Ok(Json(json!({ "status": "ok" })))
}
