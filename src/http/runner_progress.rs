//! `POST /v0/runners/steps/{step_id}/progress` (Keel addition, docs/mcp.md "Progress"): a
//! runner relays the progress a running tool reported. Recorded as `step.progress` while the
//! step runs on that runner, at most `MAX_PROGRESS_EVENTS` per step (the message cut to
//! `MAX_PROGRESS_MESSAGE_BYTES`); otherwise accepted and dropped.

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request, State};
use keel_actors::execution::machine::Progress;
use serde::Deserialize;
use serde_json::{Value, json};

use super::AppState;
use super::error::ApiError;
use super::step_report::{StepReport, read};

/// The fields of a progress report besides the ids every step report carries.
#[derive(Deserialize)]
struct ProgressFields {
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
    let report: StepReport<ProgressFields> = read(&state, path, request).await?;
    let fields = report.fields;
    let Some(progress) = fields.progress else {
        return Err(ApiError::validation("progress (a number) is required"));
    };
    if let Some(message) = &fields.message {
        super::text::refuse_nul("message", message)?;
    }
    let progress = Progress {
        progress,
        total: fields.total,
        message: fields.message,
    };
    state
        .kernel
        .step_progress(
            &report.execution_id,
            &report.step_id,
            &report.runner_id,
            progress,
        )
        .await?;
    Ok(Json(json!({ "status": "ok" })))
}
