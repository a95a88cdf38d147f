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

use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use keel_actors::events::{EventBody, LlmCall};
use keel_actors::execution::{LlmAdmission, Rejection};
use keel_actors::ids::{ExecutionId, SessionId};
use keel_actors::kernel::{Kernel, KernelError};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tracing::{debug, warn};

use super::AppState;
use crate::auth::{Principal, Role};
use crate::gateway::limits::{self, Held};
use crate::gateway::usage::{self, EventSplitter, Usage};
use crate::gateway::{Format, MAX_STORED_BODY_BYTES, Provider};

/// Header naming the session that proves the caller holds the execution.
pub const SESSION_HEADER: &str = "keel-session";
/// Header that, set to `off`, makes a re-run's call go to the provider even when an earlier run
/// recorded the same call.
pub const REPLAY_HEADER: &str = "keel-replay";
/// `anthropic-version` sent when the caller gave none.
const ANTHROPIC_VERSION: &str = "2023-06-01";
/// Events read per page when a re-run's call is looked up in the log.
const JOURNAL_PAGE: i64 = 1000;
/// Longest provider error message kept on `llm.called`, in bytes.
const MAX_ERROR_BYTES: usize = 512;
/// Largest non-streamed answer the gateway reads from a provider.
const MAX_ANSWER_BYTES: usize = 32 * 1024 * 1024;

/// Which provider API a route forwards to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    /// OpenAI `chat/completions`.
    Chat,
    /// OpenAI `embeddings`.
    Embeddings,
    /// Anthropic `messages`.
    Messages,
}

impl Route {
    fn path(self) -> &'static str {
        match self {
            Route::Chat => "chat/completions",
            Route::Embeddings => "embeddings",
            Route::Messages => "messages",
        }
    }

    fn format(self) -> Format {
        match self {
            Route::Chat | Route::Embeddings => Format::Openai,
            Route::Messages => Format::Anthropic,
        }
    }
}

/// An error in the wire format of `format`: OpenAI's `{"error": {"message", "type", "code",
/// "param"}}` or Anthropic's `{"type": "error", "error": {"type", "message"}}` (with `code`).
fn refusal(format: Format, status: StatusCode, kind: &str, code: &str, message: &str) -> Response {
    let body = match format {
        Format::Openai => {
            json!({"error": {"message": message, "type": kind, "code": code, "param": null}})
        }
        Format::Anthropic => {
            let kind = match status {
                StatusCode::BAD_REQUEST | StatusCode::CONFLICT => "invalid_request_error",
                StatusCode::UNAUTHORIZED => "authentication_error",
                StatusCode::FORBIDDEN => "permission_error",
                StatusCode::NOT_FOUND => "not_found_error",
                StatusCode::TOO_MANY_REQUESTS => "rate_limit_error",
                _ => "api_error",
            };
            json!({"type": "error", "error": {"type": kind, "message": message, "code": code}})
        }
    };
    (status, axum::Json(body)).into_response()
}

fn invalid(format: Format, status: StatusCode, code: &str, message: &str) -> Response {
    refusal(format, status, "invalid_request_error", code, message)
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
    let Some(provider) = gateway.config.providers.get(&provider) else {
        return invalid(
            format,
            StatusCode::NOT_FOUND,
            "not_found",
            &format!("no LLM provider named {provider:?} is configured"),
        );
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
    let refused = |reason: &str| state.kernel.metrics().llm.refused(reason);
    if row.status.is_terminal() {
        refused("finished");
        return finished(format, &id);
    }
    if let Err(reason) = holds(
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
    let model_id = format!("{}/{model}", provider.name);
    let runs = match state.kernel.admit_llm_call(&execution_id, &model_id).await {
        Ok(LlmAdmission::Allowed { runs }) => runs,
        Ok(LlmAdmission::ModelNotAllowed(reason)) => {
            refused("model");
            return refusal(
                format,
                StatusCode::FORBIDDEN,
                "permission_error",
                "model_not_allowed",
                &reason,
            );
        }
        Ok(LlmAdmission::Finished) => {
            refused("finished");
            return finished(format, &id);
        }
        Ok(LlmAdmission::OverBudget(reason)) => {
            refused("budget");
            return refusal(
                format,
                StatusCode::FORBIDDEN,
                "permission_error",
                "budget_exceeded",
                &format!("execution {id}: {reason}"),
            );
        }
        Err(error) => return unavailable(format, &error),
    };
    let stream = request.get("stream").and_then(Value::as_bool) == Some(true);
    let mut call = Recorder {
        kernel: state.kernel.clone(),
        execution_id,
        started: Instant::now(),
        provider: provider.clone(),
        usage: None,
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
        }),
    };
    // A re-run's call identical to one an earlier run completed gets that answer again.
    let replay_wanted = headers
        .get(REPLAY_HEADER)
        .and_then(|value| value.to_str().ok())
        .is_none_or(|value| !value.eq_ignore_ascii_case("off"));
    if runs > 1
        && replay_wanted
        && let Some(pending) = call.call.as_ref()
    {
        match journal_answer(&state.kernel, &call.execution_id, pending).await {
            Ok(Some((sequence, answer))) => return call.replay(sequence, answer).await,
            Ok(None) => {}
            Err(error) => return unavailable(format, &error),
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
    let build = || {
        let mut upstream = gateway
            .client
            .post(format!("{}/{}", provider.base_url, route.path()))
            .header(header::CONTENT_TYPE, "application/json")
            .body(upstream_body.clone());
        match (&provider.api_key, format) {
            (Some(key), Format::Openai) => upstream = upstream.bearer_auth(key.expose()),
            (Some(key), Format::Anthropic) => {
                upstream = upstream.header("x-api-key", key.expose());
            }
            (None, _) => {}
        }
        if format == Format::Anthropic {
            let version = headers
                .get("anthropic-version")
                .cloned()
                .unwrap_or_else(|| HeaderValue::from_static(ANTHROPIC_VERSION));
            upstream = upstream.header("anthropic-version", version);
            if let Some(beta) = headers.get("anthropic-beta") {
                upstream = upstream.header("anthropic-beta", beta.clone());
            }
        }
        if let Some(accept) = headers.get(header::ACCEPT) {
            upstream = upstream.header(header::ACCEPT, accept.clone());
        }
        upstream
    };
    // The provider's shared limits: wait for a slot (a parked provider, requests or tokens per
    // minute), and after a 429 wait for its Retry-After once instead of passing it on.
    let gate = &provider.gate;
    let mut retried = false;
    let answer = loop {
        if let Err(held) = gate.admit().await {
            let (status, code, reason, wait) = match held {
                Held::Throttled(wait) => (
                    StatusCode::TOO_MANY_REQUESTS,
                    "rate_limited",
                    "throttled",
                    wait,
                ),
                Held::Open(wait) => (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "provider_unavailable",
                    "breaker",
                    wait,
                ),
            };
            refused(reason);
            let message = match held {
                Held::Throttled(_) => format!(
                    "provider {} is at its limits; no slot within {} s",
                    provider.name,
                    gate.max_wait().as_secs()
                ),
                Held::Open(_) => format!(
                    "provider {} keeps failing; calls pause until its breaker closes",
                    provider.name
                ),
            };
            let mut response = refusal(format, status, "rate_limit_error", code, &message);
            let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            if let Ok(value) = HeaderValue::from_str(&seconds.max(1).to_string()) {
                response.headers_mut().insert(header::RETRY_AFTER, value);
            }
            return response;
        }
        match build().send().await {
            Ok(answer) if answer.status().as_u16() == 429 => {
                let wait = limits::retry_after(
                    answer
                        .headers()
                        .get(header::RETRY_AFTER)
                        .and_then(|value| value.to_str().ok()),
                );
                gate.answered(Some(429), wait);
                if !retried && wait.unwrap_or_default() <= gate.max_wait() {
                    retried = true;
                    continue;
                }
                break answer;
            }
            Ok(answer) => {
                gate.answered(Some(answer.status().as_u16()), None);
                break answer;
            }
            Err(error) => {
                gate.answered(None, None);
                // reqwest's message names the URL, never the key.
                warn!(provider = %provider.name, error = %error, "LLM gateway: the provider cannot be reached");
                let message = format!("the LLM provider {} cannot be reached", provider.name);
                call.finish("unreachable", None, Some(message.clone()))
                    .await;
                return refusal(
                    format,
                    StatusCode::BAD_GATEWAY,
                    "server_error",
                    "upstream_unreachable",
                    &message,
                );
            }
        }
    };
    let status = StatusCode::from_u16(answer.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut response = Response::builder().status(status);
    for name in [header::CONTENT_TYPE, header::RETRY_AFTER] {
        if let Some(value) = answer.headers().get(name.as_str())
            && let Ok(value) = HeaderValue::from_bytes(value.as_bytes())
        {
            response = response.header(name, value);
        }
    }
    let body = if stream && status.is_success() {
        Body::from_stream(relay_stream(answer, call, format, drop_usage_chunk))
    } else {
        match read_answer(answer).await {
            Ok(bytes) => {
                let parsed = serde_json::from_slice::<Value>(&bytes).ok();
                if status.is_success() {
                    if let Some(parsed) = &parsed {
                        call.usage(Usage::from_answer(format, parsed));
                        if call.provider.store_bodies && bytes.len() <= MAX_STORED_BODY_BYTES {
                            call.response(parsed.clone());
                        }
                    }
                    call.finish("ok", Some(status), None).await;
                } else {
                    let message = parsed
                        .as_ref()
                        .and_then(|parsed| parsed.pointer("/error/message"))
                        .and_then(Value::as_str)
                        .map_or_else(|| format!("the provider answered {status}"), truncate);
                    call.finish("provider_error", Some(status), Some(message))
                        .await;
                }
                Body::from(bytes)
            }
            Err(error) => {
                warn!(provider = %provider.name, error = %error, "LLM gateway: reading the provider's answer failed");
                let message = format!("reading the answer of {} failed", provider.name);
                call.finish("provider_error", Some(status), Some(message.clone()))
                    .await;
                return refusal(
                    format,
                    StatusCode::BAD_GATEWAY,
                    "server_error",
                    "upstream_invalid",
                    &message,
                );
            }
        }
    };
    response.body(body).unwrap_or_else(|_| {
        refusal(
            format,
            StatusCode::BAD_GATEWAY,
            "server_error",
            "upstream_invalid",
            "the LLM provider's answer cannot be forwarded",
        )
    })
}

/// The answer an earlier run recorded for the same call (provider, model, request digest,
/// streamed or not): the n-th such call of this run gets the n-th one recorded by earlier runs
/// (their own live calls, not their replays). Returns its sequence and answer.
async fn journal_answer(
    kernel: &Kernel,
    id: &ExecutionId,
    call: &LlmCall,
) -> Result<Option<(i64, Value)>, KernelError> {
    let mut events = Vec::new();
    let mut after = 0;
    loop {
        let page = kernel.events(id, after, JOURNAL_PAGE).await?;
        let done = i64::try_from(page.len()).unwrap_or(i64::MAX) < JOURNAL_PAGE;
        if let Some(last) = page.last() {
            after = last.sequence;
        }
        events.extend(page);
        if done {
            break;
        }
    }
    let run_start = events
        .iter()
        .rev()
        .find(|event| matches!(event.body, EventBody::ExecutionStarted { .. }))
        .map_or(0, |event| event.sequence);
    let mut recorded = Vec::new();
    let mut made = 0usize;
    for event in &events {
        let EventBody::LlmCalled(earlier) = &event.body else {
            continue;
        };
        let same = earlier.provider == call.provider
            && earlier.model == call.model
            && earlier.request_digest == call.request_digest
            && earlier.stream == call.stream;
        if !same {
            continue;
        }
        if event.sequence > run_start {
            made += 1;
        } else if earlier.replay_of.is_none() && earlier.outcome == "ok" {
            recorded.push((event.sequence, earlier.response.clone()));
        }
    }
    Ok(recorded
        .into_iter()
        .nth(made)
        .and_then(|(sequence, answer)| answer.map(|answer| (sequence, answer))))
}

/// Checks that the caller holds the execution: its live session in `Keel-Session`, an agent
/// key for its agent, or an admin credential (the bearer token or an admin key; not the
/// anonymous caller of a kernel without authentication). Returns the refusal's message.
fn holds(
    kernel: &Kernel,
    principal: Option<&Principal>,
    headers: &HeaderMap,
    execution_id: &ExecutionId,
    agent_id: &str,
) -> Result<(), String> {
    if let Some(session) = headers
        .get(SESSION_HEADER)
        .and_then(|value| value.to_str().ok())
    {
        if kernel.session_holds(&SessionId::new(session.to_owned()), execution_id) {
            return Ok(());
        }
        return Err(format!(
            "the Keel-Session header does not name the live session of execution {execution_id}"
        ));
    }
    match principal {
        Some(principal) if principal.role == Role::Admin && principal.recorded_name().is_some() => {
            Ok(())
        }
        Some(principal)
            if principal.role == Role::Agent && principal.scopes.allows_agent(agent_id) =>
        {
            Ok(())
        }
        _ => Err(format!(
            "the caller does not hold execution {execution_id}: send its session id in the \
             Keel-Session header, or use a key for agent {agent_id}"
        )),
    }
}

fn asks_for_usage(request: &Value) -> bool {
    request.pointer("/stream_options/include_usage") == Some(&Value::Bool(true))
}

fn finished(format: Format, id: &str) -> Response {
    invalid(
        format,
        StatusCode::CONFLICT,
        "execution_finished",
        &format!("execution {id} has finished; its LLM calls are closed"),
    )
}

fn unavailable(format: Format, error: &KernelError) -> Response {
    warn!(error = %error, "LLM gateway: reading the execution failed");
    refusal(
        format,
        StatusCode::SERVICE_UNAVAILABLE,
        "server_error",
        "unavailable",
        "the kernel cannot read the execution now; retry",
    )
}

fn truncate(text: &str) -> String {
    if text.len() <= MAX_ERROR_BYTES {
        return text.to_owned();
    }
    let mut end = MAX_ERROR_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// Reads a whole (non-streamed) answer, bounded.
async fn read_answer(answer: reqwest::Response) -> Result<Bytes, String> {
    let mut body = Vec::new();
    let mut chunks = answer.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|error| error.to_string())?;
        if body.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(format!(
                "the answer is larger than {MAX_ANSWER_BYTES} bytes"
            ));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(body))
}

/// Forwards a streamed answer event by event, reading the usage of its last chunk; the call is
/// recorded when the stream ends, or as `client_disconnected` when the caller goes away first
/// (the stream is dropped).
fn relay_stream(
    answer: reqwest::Response,
    call: Recorder,
    format: Format,
    drop_usage_chunk: bool,
) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>> + Send {
    struct Relay {
        upstream: futures::stream::BoxStream<'static, reqwest::Result<Bytes>>,
        splitter: EventSplitter,
        call: Recorder,
        status: StatusCode,
        drop_usage_chunk: bool,
        done: bool,
        /// What was relayed, kept for the record while within the stored-body limit.
        kept: Option<Vec<u8>>,
    }
    impl Relay {
        fn keep(&mut self, bytes: &[u8]) {
            if let Some(kept) = self.kept.as_mut() {
                if kept.len() + bytes.len() > MAX_STORED_BODY_BYTES {
                    self.kept = None;
                } else {
                    kept.extend_from_slice(bytes);
                }
            }
        }
    }
    let status = StatusCode::from_u16(answer.status().as_u16()).unwrap_or(StatusCode::OK);
    let kept = call.provider.store_bodies.then(Vec::new);
    let relay = Relay {
        kept,
        upstream: answer.bytes_stream().boxed(),
        splitter: EventSplitter::default(),
        call,
        status,
        drop_usage_chunk,
        done: false,
    };
    futures::stream::unfold(relay, move |mut relay| async move {
        if relay.done {
            return None;
        }
        loop {
            match relay.upstream.next().await {
                Some(Ok(chunk)) => {
                    let mut out = Vec::with_capacity(chunk.len());
                    for event in relay.splitter.push(&chunk) {
                        if let Some(parsed) = usage::event_json(&event) {
                            if let Some(found) = Usage::from_stream_event(format, &parsed) {
                                relay.call.usage(Some(found));
                            }
                            if relay.drop_usage_chunk && usage::usage_only(&parsed) {
                                continue;
                            }
                        }
                        out.extend_from_slice(&event);
                    }
                    if !out.is_empty() {
                        relay.keep(&out);
                        return Some((Ok(Bytes::from(out)), relay));
                    }
                }
                Some(Err(error)) => {
                    debug!(error = %error, "LLM gateway: the provider's stream broke");
                    relay.done = true;
                    let status = relay.status;
                    relay
                        .call
                        .finish(
                            "provider_error",
                            Some(status),
                            Some("the provider's stream broke off".to_owned()),
                        )
                        .await;
                    return Some((Err(std::io::Error::other("upstream stream broke")), relay));
                }
                None => {
                    relay.done = true;
                    let tail = relay.splitter.finish();
                    if let Some(tail) = &tail {
                        relay.keep(tail);
                    }
                    if let Some(kept) = relay.kept.take() {
                        let text = String::from_utf8_lossy(&kept).into_owned();
                        relay.call.response(Value::String(text));
                    }
                    let status = relay.status;
                    relay.call.finish("ok", Some(status), None).await;
                    return tail.map(|tail| (Ok(Bytes::from(tail)), relay));
                }
            }
        }
    })
}

/// A model call being made: recorded once, when it ends ([`Recorder::finish`]), or as
/// `client_disconnected` if it is dropped before (the caller went away mid-stream).
struct Recorder {
    kernel: Kernel,
    execution_id: ExecutionId,
    started: Instant,
    provider: Provider,
    call: Option<LlmCall>,
    /// Usage reported so far (a stream may report it in more than one event).
    usage: Option<Usage>,
}

impl Recorder {
    fn usage(&mut self, usage: Option<Usage>) {
        if let Some(usage) = usage {
            self.usage.get_or_insert_default().merge(usage);
        }
    }

    /// Answers with an earlier run's recorded answer and records the call as its replay.
    async fn replay(mut self, sequence: i64, answer: Value) -> Response {
        let stream = self.call.as_ref().is_some_and(|call| call.stream);
        if let Some(call) = self.call.as_mut() {
            call.replay_of = Some(sequence);
            call.request = None;
        }
        self.finish("ok", Some(StatusCode::OK), None).await;
        match answer {
            Value::String(events) if stream => {
                ([(header::CONTENT_TYPE, "text/event-stream")], events).into_response()
            }
            answer => axum::Json(answer).into_response(),
        }
    }

    fn response(&mut self, response: Value) {
        if let Some(call) = self.call.as_mut() {
            call.response = Some(response);
        }
    }

    fn take(
        &mut self,
        outcome: &str,
        status: Option<StatusCode>,
        error: Option<String>,
    ) -> Option<LlmCall> {
        let mut call = self.call.take()?;
        if let Some(usage) = self.usage {
            self.provider.gate.used(usage.total().unwrap_or(0));
            call.input_tokens = usage.input;
            call.output_tokens = usage.output;
            call.cached_tokens = usage.cached;
            call.cost = usage::cost(Some(&usage), self.provider.price(&call.model));
        }
        call.outcome = outcome.to_owned();
        call.status = status.map(|status| status.as_u16());
        call.error = error;
        call.latency_ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        Some(call)
    }

    /// Records the call with its outcome (once).
    async fn finish(&mut self, outcome: &str, status: Option<StatusCode>, error: Option<String>) {
        if let Some(call) = self.take(outcome, status, error) {
            record(&self.kernel, &self.execution_id, call).await;
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        if let Some(call) = self.take("client_disconnected", None, None) {
            let kernel = self.kernel.clone();
            let execution_id = self.execution_id.clone();
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move { record(&kernel, &execution_id, call).await });
            }
        }
    }
}

async fn record(kernel: &Kernel, execution_id: &ExecutionId, call: LlmCall) {
    kernel.metrics().llm.call(
        &call.provider,
        &call.model,
        &call.outcome,
        call.latency_ms as f64 / 1000.0,
        [
            ("input", call.input_tokens),
            ("output", call.output_tokens),
            ("cached", call.cached_tokens),
        ],
        call.cost.as_ref().and_then(|cost| cost.get("usd").copied()),
    );
    let (provider, model, outcome) = (
        call.provider.clone(),
        call.model.clone(),
        call.outcome.clone(),
    );
    if let Err(error) = kernel.record_llm_call(execution_id, call).await {
        // The execution ended while the call ran: its terminal event stays the last one.
        warn!(execution_id = %execution_id, provider = %provider, model = %model,
              outcome = %outcome, error = %error, "LLM gateway: the model call could not be recorded");
    }
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
