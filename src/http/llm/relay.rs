//! The provider's answer, relayed to the caller: a whole answer read (bounded) and passed on, or a
//! stream forwarded event by event as it arrives, and recorded when it ends.

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use futures::StreamExt;
use serde_json::Value;
use tracing::{debug, warn};

use super::recorder::Recorder;
use super::refusal::{refusal, truncate};
use crate::gateway::usage::{self, EventSplitter, Usage};
use crate::gateway::{Format, MAX_STORED_BODY_BYTES};

/// Largest non-streamed answer the gateway reads from a provider.
const MAX_ANSWER_BYTES: usize = 32 * 1024 * 1024;

/// Answers the caller with the provider's `answer` (status, content type, `Retry-After`, body),
/// recording the call when the answer has ended.
pub(super) async fn respond(
    answer: reqwest::Response,
    mut call: Recorder,
    format: Format,
    stream: bool,
    drop_usage_chunk: bool,
) -> Response {
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
                        call.answered_by(parsed);
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
                warn!(provider = %call.provider.name, error = %error, "LLM gateway: reading the provider's answer failed");
                let message = format!("reading the answer of {} failed", call.provider.name);
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

/// Reads a whole (non-streamed) answer, bounded.
pub(super) async fn read_answer(answer: reqwest::Response) -> Result<Bytes, String> {
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
pub(super) fn relay_stream(
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
                            relay.call.answered_by(&parsed);
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
