//! Guardrail routes (docs/guardrails.md): `GET /v0/breakers`, the circuit breakers that are
//! open, half-open or counting recent failures.

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use super::AppState;
use super::error::ApiError;

/// `GET /v0/breakers`: `{"breakers": [...]}`, ordered by tool id.
pub async fn breakers(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let breakers = state.kernel.breakers().await?;
    Ok(Json(json!({ "breakers": breakers })))
}
