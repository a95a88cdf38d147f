//! What every runner step report (`POST /v0/runners/steps/{step_id}/started` and
//! `.../progress`) starts with: the step from the path, its execution and the reporting runner
//! from the body, read and checked one way before the route looks at its own fields.

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request};
use keel_actors::ids::{ExecutionId, RunnerId, StepId};
use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::AppState;
use super::body::read_json;
use super::error::ApiError;
use super::executions::{check_length, path_id};

/// The body of a step report: the two ids every report carries and the route's own fields.
#[derive(Deserialize)]
struct Envelope<B> {
    execution_id: Option<String>,
    runner_id: Option<String>,
    #[serde(flatten)]
    fields: B,
}

/// A report with no fields of its own (`started`).
#[derive(Deserialize)]
pub(super) struct NoFields {}

/// A step report whose ids passed the checks.
pub(super) struct StepReport<B> {
    pub step_id: StepId,
    pub execution_id: ExecutionId,
    pub runner_id: RunnerId,
    /// The route's own fields.
    pub fields: B,
}

/// Reads a step report: the JSON body as `B` plus `execution_id` and `runner_id`, both required
/// and free of NUL, the runner id within the id length, and a caller whose key may act as that
/// runner. Every refusal is a JSON error and changes nothing.
pub(super) async fn read<B: DeserializeOwned>(
    state: &AppState,
    path: Result<Path<String>, PathRejection>,
    request: Request,
) -> Result<StepReport<B>, ApiError> {
    let step_id = StepId::new(path_id(path)?);
    let principal = super::keys::principal_of(&request);
    let body: Envelope<B> = read_json(
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
    check_length("runner_id", &runner_id)?;
    super::text::refuse_nul("execution_id", &execution_id)?;
    super::auth::check_runner(&principal, &runner_id)?;
    Ok(StepReport {
        step_id,
        execution_id: ExecutionId::new(execution_id),
        runner_id: RunnerId::new(runner_id),
        fields: body.fields,
    })
}
