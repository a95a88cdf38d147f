//! The call to the provider: the request built with the provider's key in place of the caller's
//! credentials, sent within the provider's shared limits.

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use tracing::warn;

use super::Route;
use super::refusal::refusal;
use crate::gateway::limits::{self, Held};
use crate::gateway::{Format, Gateway, Provider};

/// `anthropic-version` sent when the caller gave none.
const ANTHROPIC_VERSION: &str = "2023-06-01";

/// Why a call got no answer from its provider, with the refusal to answer it.
pub(super) enum Unanswered {
    /// The provider's limits held it (no slot in time); nothing reached the provider.
    Throttled(Response),
    /// The provider's breaker is open; nothing reached the provider.
    BreakerOpen(Response),
    /// The provider cannot be reached; the message says so.
    Unreachable(String, Response),
}

impl Unanswered {
    /// Whether another model may answer instead (the provider is failing, not just busy).
    pub(super) fn failing(&self) -> bool {
        !matches!(self, Unanswered::Throttled(_))
    }
}

/// Sends `upstream_body` to `provider`'s API for `route`. Waits for a slot within the
/// provider's limits (a parked provider, requests or tokens per minute), and after a 429 waits
/// for its Retry-After once instead of passing it on. A refusal or an unreachable provider is
/// `Err`, with the refusal to answer.
pub(super) async fn send(
    kernel: &keel_actors::kernel::Kernel,
    gateway: &Gateway,
    provider: &Provider,
    route: Route,
    headers: &HeaderMap,
    upstream_body: Bytes,
    model: &str,
) -> Result<reqwest::Response, Unanswered> {
    let metrics = &kernel.metrics().llm;
    let format = route.format();
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
    loop {
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
            metrics.refused(&provider.name, Some(model), reason);
            let kind = match held {
                Held::Throttled(_) => "rate_limited",
                Held::Open(_) => "breaker_open",
            };
            metrics.throttled(&provider.name, model, kind);
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
            return Err(match held {
                Held::Throttled(_) => Unanswered::Throttled(response),
                Held::Open(_) => Unanswered::BreakerOpen(response),
            });
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
                metrics.throttled(&provider.name, model, "provider_429");
                if !retried && wait.unwrap_or_default() <= gate.max_wait() {
                    retried = true;
                    continue;
                }
                return Ok(answer);
            }
            Ok(answer) => {
                gate.answered(Some(answer.status().as_u16()), None);
                return Ok(answer);
            }
            Err(error) => {
                gate.answered(None, None);
                // reqwest's message names the URL, never the key.
                warn!(provider = %provider.name, error = %error, "LLM gateway: the provider cannot be reached");
                let message = format!("the LLM provider {} cannot be reached", provider.name);
                let response = refusal(
                    format,
                    StatusCode::BAD_GATEWAY,
                    "server_error",
                    "upstream_unreachable",
                    &message,
                );
                return Err(Unanswered::Unreachable(message, response));
            }
        }
    }
}
