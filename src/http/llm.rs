//! `POST /v0/executions/{id}/llm/{provider}/v1/chat/completions`: the LLM gateway's
//! OpenAI-compatible route (`crate::gateway`). The caller authenticates like any other route
//! (the kernel token); the execution must exist and still run. The body goes upstream byte for
//! byte with the provider's key in place of the caller's credentials; the answer comes back
//! with its status and content type, a stream forwarded chunk by chunk as it arrives.
//! Refusals use the OpenAI error shape (`{"error": {"message", "type", "code"}}`) so that
//! OpenAI clients raise their usual errors.

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use keel_actors::execution::Rejection;
use keel_actors::ids::ExecutionId;
use keel_actors::kernel::KernelError;
use serde_json::json;
use tracing::warn;

use super::AppState;

/// An error in the OpenAI wire format.
fn openai_error(status: StatusCode, kind: &str, code: &str, message: &str) -> Response {
    (
        status,
        axum::Json(
            json!({"error": {"message": message, "type": kind, "code": code, "param": null}}),
        ),
    )
        .into_response()
}

/// Forwards one chat completion of execution `id` to provider `provider`.
pub async fn chat_completions(
    State(state): State<AppState>,
    Path((id, provider)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some(gateway) = state.settings.gateway.as_ref() else {
        return openai_error(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            "not_found",
            "the LLM gateway is not configured (start the kernel with --llm-config)",
        );
    };
    let Some(provider) = gateway.config.providers.get(&provider) else {
        return openai_error(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            "not_found",
            &format!("no LLM provider named {provider:?} is configured"),
        );
    };
    match state.kernel.execution(&ExecutionId::new(id.clone())).await {
        Ok(row) if row.status.is_terminal() => {
            return openai_error(
                StatusCode::CONFLICT,
                "invalid_request_error",
                "execution_finished",
                &format!("execution {id} has finished; its LLM calls are closed"),
            );
        }
        Ok(_) => {}
        Err(KernelError::Rejected(Rejection::ExecutionNotFound(_))) => {
            return openai_error(
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                "not_found",
                &format!("execution {id} not found"),
            );
        }
        Err(error) => {
            warn!(error = %error, "LLM gateway: reading the execution failed");
            return openai_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                "unavailable",
                "the kernel cannot read the execution now; retry",
            );
        }
    }
    if serde_json::from_slice::<serde::de::IgnoredAny>(&body).is_err() {
        return openai_error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "invalid_json",
            "the request body is not JSON",
        );
    }
    let mut request = gateway
        .client
        .post(format!("{}/chat/completions", provider.base_url))
        .header(header::CONTENT_TYPE, "application/json")
        .body(body);
    if let Some(key) = &provider.api_key {
        request = request.bearer_auth(key.expose());
    }
    if let Some(accept) = headers.get(header::ACCEPT) {
        request = request.header(header::ACCEPT, accept.clone());
    }
    let upstream = match request.send().await {
        Ok(upstream) => upstream,
        Err(error) => {
            // reqwest's message names the URL, never the key.
            warn!(provider = %provider.name, error = %error, "LLM gateway: the provider cannot be reached");
            return openai_error(
                StatusCode::BAD_GATEWAY,
                "server_error",
                "upstream_unreachable",
                &format!("the LLM provider {} cannot be reached", provider.name),
            );
        }
    };
    let status =
        StatusCode::from_u16(upstream.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut response = Response::builder().status(status);
    for name in [header::CONTENT_TYPE, header::RETRY_AFTER] {
        if let Some(value) = upstream.headers().get(name.as_str())
            && let Ok(value) = HeaderValue::from_bytes(value.as_bytes())
        {
            response = response.header(name, value);
        }
    }
    response
        .body(Body::from_stream(upstream.bytes_stream()))
        .unwrap_or_else(|_| {
            openai_error(
                StatusCode::BAD_GATEWAY,
                "server_error",
                "upstream_invalid",
                "the LLM provider's answer cannot be forwarded",
            )
        })
}

/// Any other path under an execution's `llm/{provider}/`: refused in OpenAI's error shape,
/// naming the path, so that a client pointed at the gateway learns what is not forwarded.
pub async fn unknown_route(Path((_, provider, rest)): Path<(String, String, String)>) -> Response {
    openai_error(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        "unknown_route",
        &format!(
            "the LLM gateway does not forward {provider}/{rest}; it forwards POST {provider}/v1/chat/completions"
        ),
    )
}
