//! Observability routes (WIRE.md §5): liveness, readiness (a store round trip) and the
//! OpenMetrics exposition. Health and ready are exempt from authentication; `/metrics` is not.

use axum::Json;
use axum::extract::State;
use axum::http::HeaderValue;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::AppState;
use super::error::ApiError;

/// Content type of the metrics exposition.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// `GET /v0/health`: 200 while the process serves HTTP.
pub async fn health() -> Json<serde_json::Value> {
    Json(json!({ "status": "ok" }))
}

/// `GET /v0/ready`: 200 when the store answers, else 503. A cluster kernel is also ready only
/// while it is a live member (its lease manager stamped its heartbeat less than a lease ago
/// and it was not superseded), whether or not it holds partitions yet: it answers every
/// request, forwarding those of partitions held elsewhere.
pub async fn ready(State(state): State<AppState>) -> Result<Json<serde_json::Value>, ApiError> {
    if let Some(routing) = &state.settings.cluster
        && !routing.ownership().is_live_member()
    {
        return Err(ApiError::Unavailable(
            "service unavailable: not a live member of the cluster".to_owned(),
        ));
    }
    match state.kernel.ready().await {
        Ok(()) => Ok(Json(json!({ "status": "ready" }))),
        Err(error) => {
            tracing::warn!(error = %error, "readiness check failed");
            Err(ApiError::Unavailable(
                "service unavailable: database not reachable".to_owned(),
            ))
        }
    }
}

/// `GET /metrics`: the kernel's metrics in OpenMetrics text format.
pub async fn metrics(State(state): State<AppState>) -> Response {
    state.kernel.refresh_queue_metrics().await;
    let mut text = state.kernel.encode_metrics();
    if let Some(routing) = &state.settings.cluster {
        // The cluster's families go before the closing `# EOF`.
        let end = text.rfind("# EOF").unwrap_or(text.len());
        text.insert_str(end, &routing.encode_metrics());
    }
    let mut response = text.into_response();
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(OPENMETRICS));
    response
}
