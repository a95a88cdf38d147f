//! `POST /v0/executions/{id}/llm/{provider}/v1/chat/completions`: the LLM gateway's
//! OpenAI-compatible route (`crate::gateway`, docs/llm.md).
//!
//! The caller must hold the execution: its live session in the `Keel-Session` header, or an
//! agent key whose scope covers the execution's agent, or an admin credential. The execution
//! must still run and be within its `max_cost` budget. The body goes upstream with the
//! provider's key in place of the caller's credentials; the answer comes back with its status
//! and content type, a stream forwarded event by event as it arrives. Each call is recorded on
//! the execution as `llm.called` (usage, cost, latency, outcome) once its answer has ended.
//! Refusals use the OpenAI error shape (`{"error": {"message", "type", "code"}}`) so that
//! OpenAI clients raise their usual errors.

mod admission;
mod cassette;
mod estimate;
mod holder;
pub(super) use holder::{SESSION_HEADER, holds};
mod recorder;
mod refusal;
mod relay;
mod replay;
mod span;
mod upstream;

use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use keel_actors::events::LlmCall;
use keel_actors::execution::Rejection;
use keel_actors::ids::ExecutionId;
use keel_actors::kernel::KernelError;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tracing::warn;

use super::AppState;
use crate::auth::Principal;
use crate::gateway::{Format, MAX_STORED_BODY_BYTES};
use recorder::Recorder;
use refusal::{finished, invalid, refusal, unavailable};

/// Which provider API a route forwards to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Route {
    /// OpenAI `chat/completions`.
    Chat,
    /// OpenAI `embeddings`.
    Embeddings,
    /// Anthropic `messages`.
    Messages,
}

impl Route {
    pub(super) fn path(self) -> &'static str {
        match self {
            Route::Chat => "chat/completions",
            Route::Embeddings => "embeddings",
            Route::Messages => "messages",
        }
    }

    pub(super) fn format(self) -> Format {
        match self {
            Route::Chat | Route::Embeddings => Format::Openai,
            Route::Messages => Format::Anthropic,
        }
    }
}

/// `POST …/llm/{provider}/v1/chat/completions` (OpenAI format).
pub async fn chat_completions(
    state: State<AppState>,
    path: Path<(String, String)>,
    principal: Option<axum::Extension<Principal>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    forward(state, path, principal, headers, body, Route::Chat).await
}

/// `POST …/llm/{provider}/v1/embeddings` (OpenAI format).
pub async fn embeddings(
    state: State<AppState>,
    path: Path<(String, String)>,
    principal: Option<axum::Extension<Principal>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    forward(state, path, principal, headers, body, Route::Embeddings).await
}

/// `POST …/llm/{provider}/v1/messages` (Anthropic format).
pub async fn messages(
    state: State<AppState>,
    path: Path<(String, String)>,
    principal: Option<axum::Extension<Principal>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    forward(state, path, principal, headers, body, Route::Messages).await
}

/// Forwards one call of execution `id` to provider `provider`.
async fn forward(
    State(state): State<AppState>,
    Path((id, provider)): Path<(String, String)>,
    principal: Option<axum::Extension<Principal>>,
    headers: HeaderMap,
    body: Bytes,
    route: Route,
) -> Response {
    let format = route.format();
    let Some(gateway) = state.settings.gateway.as_ref() else {
        return invalid(
            format,
            StatusCode::NOT_FOUND,
            "not_found",
            "the LLM gateway is not configured (start the kernel with --llm-config)",
        );
    };
    let offline;
    let provider = match gateway.config.providers.get(&provider) {
        Some(configured) => configured,
        // A cassette's providers need no configuration: they are never called.
        None if gateway
            .cassette
            .as_ref()
            .is_some_and(|cassette| cassette.providers().contains_key(&provider)) =>
        {
            offline = crate::gateway::Provider::offline(&provider, format);
            &offline
        }
        None => {
            return invalid(
                format,
                StatusCode::NOT_FOUND,
                "not_found",
                &format!("no LLM provider named {provider:?} is configured"),
            );
        }
    };
    if provider.format != format {
        return invalid(
            format,
            StatusCode::NOT_FOUND,
            "unknown_route",
            &format!(
                "provider {} speaks the {} format, which has no {} route",
                provider.name,
                provider.format.as_str(),
                route.path()
            ),
        );
    }
    let execution_id = ExecutionId::new(id.clone());
    let row = match state.kernel.execution(&execution_id).await {
        Ok(row) => row,
        Err(KernelError::Rejected(Rejection::ExecutionNotFound(_))) => {
            return invalid(
                format,
                StatusCode::NOT_FOUND,
                "not_found",
                &format!("execution {id} not found"),
            );
        }
        Err(error) => return unavailable(format, &error),
    };
    // Refused before the request is read: no model label (see `LlmMetrics::refused`).
    let refused = |reason: &str| {
        state
            .kernel
            .metrics()
            .llm
            .refused(&provider.name, None, reason)
    };
    if row.status.is_terminal() {
        refused("finished");
        return finished(format, &id);
    }
    if let Err(reason) = holder::holds(
        &state.kernel,
        principal.as_deref(),
        &headers,
        &execution_id,
        row.agent_id.as_str(),
    ) {
        refused("holder");
        return refusal(
            format,
            StatusCode::FORBIDDEN,
            "permission_error",
            "not_execution_holder",
            &reason,
        );
    }
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return invalid(
            format,
            StatusCode::BAD_REQUEST,
            "invalid_json",
            "the request body is not JSON",
        );
    };
    let model = request
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let call_model = model.clone();
    let estimate = estimate::estimate(route, &request, body.len(), provider.price(&model));
    let admitted = match admission::admit(
        &state.kernel,
        &execution_id,
        provider,
        &model,
        format,
        &estimate,
    )
    .await
    {
        Ok(admitted) => admitted,
        Err(refused) => return refused,
    };
    let stream = request.get("stream").and_then(Value::as_bool) == Some(true);
    let mut call = Recorder {
        kernel: state.kernel.clone(),
        execution_id,
        started: Instant::now(),
        provider: provider.clone(),
        usage: None,
        reservation: admitted.reservation,
        span: span::open(
            route,
            &provider.name,
            &model,
            &id,
            admitted.traceparent.as_deref(),
        ),
        response_model: None,
        call: Some(LlmCall {
            provider: provider.name.clone(),
            model,
            stream,
            outcome: String::new(),
            status: None,
            latency_ms: 0,
            request_digest: hex::encode(Sha256::digest(&body)),
            input_tokens: None,
            output_tokens: None,
            cached_tokens: None,
            cost: None,
            error: None,
            request: (provider.store_bodies && body.len() <= MAX_STORED_BODY_BYTES)
                .then(|| request.clone()),
            response: None,
            replay_of: None,
            fallback: None,
        }),
    };
    if let Some(recorded) = &gateway.cassette {
        return cassette::serve(recorded, call, format).await;
    }
    // A re-run's call identical to one an earlier run completed gets that answer again.
    if admitted.runs > 1
        && replay::wanted(&headers)
        && let Some(pending) = call.call.as_ref()
    {
        match replay::journal_answer(&state.kernel, &call.execution_id, pending).await {
            Ok(Some((sequence, answer))) => return call.replay(sequence, answer).await,
            Ok(None) => {}
            Err(error) => {
                call.abandon().await;
                return unavailable(format, &error);
            }
        }
    }
    // A stream's usage comes in its last chunk only when asked for; the gateway asks on the
    // caller's behalf and drops that chunk again unless the caller asked for it too.
    let (upstream_body, drop_usage_chunk) =
        if route == Route::Chat && stream && !asks_for_usage(&request) {
            let mut request = request;
            if let Some(object) = request.as_object_mut() {
                let options = object.entry("stream_options").or_insert_with(|| json!({}));
                if let Some(options) = options.as_object_mut() {
                    options.insert("include_usage".to_owned(), Value::Bool(true));
                }
            }
            (Bytes::from(request.to_string()), true)
        } else {
            (body, false)
        };
    let mut sent = upstream::send(
        &state.kernel,
        gateway,
        provider,
        route,
        &headers,
        upstream_body.clone(),
        &call_model,
    )
    .await;
    // A failing model (breaker open, 5xx, unreachable) hands the call to its fallback.
    let failing = match &sent {
        Ok(answer) => answer.status().is_server_error(),
        Err(unanswered) => unanswered.failing(),
    };
    if failing && let Some((backup, backup_model)) = gateway.config.fallback(provider, &call_model)
    {
        warn!(provider = %provider.name, model = %call_model, fallback = %format!("{}/{backup_model}", backup.name),
              "LLM gateway: the model is failing; its fallback answers");
        call.fall_back(backup, &backup_model);
        let body = with_model(&upstream_body, &backup_model);
        sent = upstream::send(
            &state.kernel,
            gateway,
            backup,
            route,
            &headers,
            body,
            &backup_model,
        )
        .await;
    }
    let answer = match sent {
        Ok(answer) => answer,
        Err(
            upstream::Unanswered::Throttled(response) | upstream::Unanswered::BreakerOpen(response),
        ) => {
            call.abandon().await;
            return response;
        }
        Err(upstream::Unanswered::Unreachable(message, response)) => {
            call.finish("unreachable", None, Some(message)).await;
            return response;
        }
    };
    relay::respond(answer, call, format, stream, drop_usage_chunk).await
}

/// `body` (a JSON object) with its `model` replaced.
fn with_model(body: &Bytes, model: &str) -> Bytes {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(mut object)) => {
            object.insert("model".to_owned(), Value::String(model.to_owned()));
            Bytes::from(Value::Object(object).to_string())
        }
        _ => body.clone(),
    }
}

fn asks_for_usage(request: &Value) -> bool {
    request.pointer("/stream_options/include_usage") == Some(&Value::Bool(true))
}

/// Any other path under an execution's `llm/{provider}/`: refused in OpenAI's error shape,
/// naming the path, so that a client pointed at the gateway learns what is not forwarded.
pub async fn unknown_route(Path((_, provider, rest)): Path<(String, String, String)>) -> Response {
    refusal(
        Format::Openai,
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        "unknown_route",
        &format!(
            "the LLM gateway does not forward {provider}/{rest}; it forwards POST v1/chat/completions and v1/embeddings (OpenAI format) and v1/messages (Anthropic format)"
        ),
    )
}
