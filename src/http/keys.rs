//! The admin API of API keys (docs/security.md): `GET /v0/keys`, `POST /v0/keys`,
//! `POST /v0/keys/{name}/rotate`, `DELETE /v0/keys/{name}`. Only admins reach it (`auth.rs`).
//! The secret of a new or rotated key is in that one response and nowhere else.

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use serde_json::{Value, json};

use super::AppState;
use super::body::read_json;
use super::error::ApiError;
use crate::auth::{KeyError, NewKey, Principal};

impl From<KeyError> for ApiError {
    fn from(error: KeyError) -> Self {
        match error {
            KeyError::Invalid(message) => ApiError::BadRequest(message),
            KeyError::NotFound(_) => ApiError::NotFound(error.to_string()),
            KeyError::Taken(_) => ApiError::Conflict(error.to_string()),
            KeyError::Store(error) => keel_actors::kernel::KernelError::from(error).into(),
        }
    }
}

/// The principal of a request (`anonymous` on an open kernel).
pub fn principal_of(request: &Request) -> Principal {
    request
        .extensions()
        .get::<Principal>()
        .cloned()
        .unwrap_or_else(Principal::anonymous)
}

/// `GET /v0/keys`: every key, without secrets or hashes.
pub async fn list(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    state
        .keys
        .ensure_loaded()
        .await
        .map_err(|error| ApiError::from(KeyError::Store(error)))?;
    Ok(Json(json!({ "keys": state.keys.list() })))
}

/// `POST /v0/keys`: creates a key; 201 with the key and its secret.
pub async fn create(
    State(state): State<AppState>,
    request: Request,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let by = principal_of(&request);
    let new: NewKey = read_json(
        request,
        state.settings.body_limit,
        state.settings.body_read_timeout,
    )
    .await?;
    let issued = state.keys.create(new, &by.name).await?;
    tracing::info!(key = %issued.record.name, role = %issued.record.role, by = %by.name, "API key created");
    Ok((
        StatusCode::CREATED,
        Json(json!({
            "key": issued.record.public_view(&issued.public_id, keel_actors::time::now()),
            "secret": issued.token,
        })),
    ))
}

/// `POST /v0/keys/{name}/rotate`: a new secret for the key; the old one stops working.
pub async fn rotate(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    request: Request,
) -> Result<Json<Value>, ApiError> {
    super::cross_site::require_json(request.headers())?;
    let name = key_name(path)?;
    let by = principal_of(&request);
    let issued = state.keys.rotate(&name).await?;
    tracing::info!(key = %name, by = %by.name, "API key rotated");
    Ok(Json(json!({
        "key": issued.record.public_view(&issued.public_id, keel_actors::time::now()),
        "secret": issued.token,
    })))
}

/// `DELETE /v0/keys/{name}`: revokes the key (kept, listed as revoked).
pub async fn revoke(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    request: Request,
) -> Result<Json<Value>, ApiError> {
    let name = key_name(path)?;
    let by = principal_of(&request);
    let key = state.keys.revoke(&name).await?;
    tracing::info!(key = %name, by = %by.name, "API key revoked");
    Ok(Json(json!({ "key": key })))
}

fn key_name(path: Result<Path<String>, PathRejection>) -> Result<String, ApiError> {
    path.map(|Path(name)| name)
        .map_err(|_| ApiError::validation("invalid key name in path"))
}
