//! `POST /v0/executions/{id}/steps/{step_id}/reconcile`: an operator's answer to a step whose
//! outcome is unknown (an `idempotency: at_most_once` step that lost its runner after delivery;
//! docs/failure-semantics.md).

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request, State};
use keel_actors::execution::machine::Reconciliation;
use keel_actors::ids::{ExecutionId, StepId};
use serde::Deserialize;
use serde_json::{Value, json};

use super::AppState;
use super::body::read_json;
use super::error::ApiError;

#[derive(Deserialize)]
struct ReconcileRequest {
    answer: Option<String>,
    result: Option<Value>,
    error: Option<String>,
}

/// Records the answer: `happened` (with `result`), `run_again`, or `fail` (with `error`).
pub async fn reconcile(
    State(state): State<AppState>,
    path: Result<Path<(String, String)>, PathRejection>,
    request: Request,
) -> Result<Json<Value>, ApiError> {
    let Path((id, step_id)) =
        path.map_err(|rejection| ApiError::validation(rejection.body_text()))?;
    let principal = super::keys::principal_of(&request);
    let body: ReconcileRequest = read_json(
        request,
        state.settings.body_limit,
        state.settings.body_read_timeout,
    )
    .await?;
    let answer = match body.answer.as_deref() {
        Some("happened") => Reconciliation::Happened(body.result.unwrap_or(Value::Null)),
        Some("run_again") => Reconciliation::RunAgain,
        Some("fail") => Reconciliation::Fail(
            body.error
                .filter(|error| !error.is_empty())
                .unwrap_or_else(|| "failed by an operator: the outcome was unknown".to_owned()),
        ),
        Some(other) => {
            return Err(ApiError::validation(format!(
                "answer must be happened, run_again or fail, not {other:?}"
            )));
        }
        None => {
            return Err(ApiError::validation(
                "answer is required: happened, run_again or fail",
            ));
        }
    };
    state
        .kernel
        .reconcile_step(
            &ExecutionId::new(id),
            &StepId::new(step_id),
            answer,
            principal.recorded_name(),
        )
        .await?;
    Ok(Json(json!({ "status": "ok" })))
}
