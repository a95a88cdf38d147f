//! Request ids (WIRE.md §1.3) and the per-request tracing span.
//!
//! Every response carries `X-Request-ID`: the caller's value when it is at most 128 bytes and
//! free of CR/LF, otherwise a fresh UUID. Each request runs in a span with its method, matched
//! route and request id, so every log line of a handler (and of the error envelope) names them,
//! and its duration until the response head is recorded in `keel_http_request_duration_seconds`.

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse as _, Response};
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use super::{AppState, auth};

/// Header carrying the request id.
pub static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Route name of requests no route matches.
const UNMATCHED: &str = "unmatched";

/// Longest caller-chosen request id that is echoed.
const MAX_REQUEST_ID_BYTES: usize = 128;

/// Assigns the request id, answers CORS preflights and refuses unauthenticated requests
/// (`auth.rs`), runs the request in its span, gives a 405 the error envelope and echoes the id.
pub async fn request_id(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    let id = request
        .headers()
        .get(&X_REQUEST_ID)
        .filter(|value| acceptable(value.as_bytes()))
        .cloned()
        .unwrap_or_else(fresh_id);
    request
        .headers_mut()
        .insert(X_REQUEST_ID.clone(), id.clone());
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| UNMATCHED.to_owned(), |path| path.as_str().to_owned());
    let method = request.method().clone();
    let span = request_span(request.method(), &route, &id);
    if request.headers().contains_key(TRACEPARENT) {
        // A client's trace: this request's span joins it (W3C trace context).
        let parent = opentelemetry::global::get_text_map_propagator(|propagator| {
            propagator.extract(&Headers(request.headers()))
        });
        let _ = span.set_parent(parent);
    }
    let started = Instant::now();
    let cors = auth::cors_for(&state, request.headers());
    let mut response = match auth::authenticate(&state, &mut request, &route).await {
        Err(answer) => answer,
        Ok(principal) => match super::text::refuse_nul_in_uri(request.uri())
            .and_then(|()| {
                let credentials = state.settings.bearer_token.is_some() || state.keys.has_keys();
                super::hosts::check(&state, &request, credentials)
            })
            .and_then(|()| super::cross_site::check(&state, &request))
        {
            Err(error) => error.into_response(),
            Ok(()) => {
                // What the request causes records its principal (`keel_actors::principal`).
                let acting = principal
                    .as_ref()
                    .map_or_else(|| std::sync::Arc::from("anonymous"), |p| p.name.clone());
                let work = next.run(request).instrument(span.clone());
                let response = keel_actors::principal::acting_as(acting, work).await;
                auth::bind_stream(
                    principal,
                    super::error::method_not_allowed(&method, response),
                )
            }
        },
    };
    if let Some(cors) = cors {
        auth::add_cors(cors, &mut response);
    }
    state.kernel.metrics().operator.http_request(
        method.as_str(),
        &route,
        response.status().as_u16(),
        started.elapsed().as_secs_f64(),
    );
    span.record("http.response.status_code", response.status().as_u16());
    // An explicit parent: entering the span to log at a level that is usually off cost an
    // enter and an exit of the span per request.
    tracing::debug!(
        parent: &span,
        http.status = response.status().as_u16(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "request answered"
    );
    response.headers_mut().insert(X_REQUEST_ID.clone(), id);
    response
}

/// The span of one request: with the names an exported trace needs when spans are exported
/// ([`exported`]), else with only what log lines show.
fn request_span(method: &axum::http::Method, route: &str, id: &HeaderValue) -> tracing::Span {
    if exported() {
        tracing::info_span!(
            "request",
            otel.name = %format_args!("{} {route}", method),
            otel.kind = "server",
            http.method = %method,
            http.route = %route,
            http.response.status_code = tracing::field::Empty,
            request.id = %String::from_utf8_lossy(id.as_bytes()),
            execution.id = tracing::field::Empty,
            agent.id = tracing::field::Empty,
            step.id = tracing::field::Empty,
            tool.id = tracing::field::Empty,
        )
    } else {
        // Only log lines read this span: no export names, and the status code (logged by
        // "request answered" at debug) is not recorded.
        tracing::info_span!(
            "request",
            http.method = %method,
            http.route = %route,
            request.id = %String::from_utf8_lossy(id.as_bytes()),
            execution.id = tracing::field::Empty,
            agent.id = tracing::field::Empty,
            step.id = tracing::field::Empty,
            tool.id = tracing::field::Empty,
        )
    }
}

/// Returns whether spans are exported as traces (an OpenTelemetry layer enables the actors'
/// trace target; the log layer never does). A cached callsite check.
fn exported() -> bool {
    tracing::enabled!(target: keel_actors::trace::TARGET, tracing::Level::INFO)
}

/// W3C trace context header.
const TRACEPARENT: &str = "traceparent";

/// Request headers as an OpenTelemetry extractor.
struct Headers<'a>(&'a axum::http::HeaderMap);

impl opentelemetry::propagation::Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(axum::http::HeaderName::as_str).collect()
    }
}

/// Records `value` as the `execution.id`, `agent.id`, `step.id` or `tool.id` attribute of the
/// current request's span (and so of its trace span when traces are exported).
pub fn record(field: &'static str, value: &str) {
    tracing::Span::current().record(field, value);
}

/// Returns whether a caller's request id may be echoed.
fn acceptable(value: &[u8]) -> bool {
    !value.is_empty()
        && value.len() <= MAX_REQUEST_ID_BYTES
        && !value.iter().any(|&byte| byte == b'\r' || byte == b'\n')
}

fn fresh_id() -> HeaderValue {
    let id = uuid::Uuid::new_v4().hyphenated().to_string();
    // A hyphenated UUID is always a valid header value.
    HeaderValue::from_str(&id).unwrap_or_else(|_| HeaderValue::from_static("invalid-request-id"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_or_empty_ids_are_replaced() {
        assert!(acceptable(b"abc-123"));
        assert!(acceptable(&[b'a'; 128]));
        assert!(!acceptable(&[b'a'; 129]));
        assert!(!acceptable(b""));
        assert!(!acceptable(b"a\nb"));
        assert_eq!(fresh_id().len(), 36);
    }

    #[test]
    fn the_export_names_are_on_the_span_only_when_traces_are_exported() {
        let id = HeaderValue::from_static("r-1");
        let fields = |dispatch: &tracing::Dispatch| {
            tracing::dispatcher::with_default(dispatch, || {
                let span = request_span(&axum::http::Method::POST, "/v0/agents/intent", &id);
                let metadata = span.metadata().expect("the request span is enabled");
                metadata
                    .fields()
                    .iter()
                    .map(|field| field.name())
                    .collect::<Vec<_>>()
            })
        };
        let logs_only = crate::telemetry::subscriber("info", crate::config::LogFormat::Text, None)
            .expect("subscriber");
        let logged = fields(&logs_only);
        assert!(logged.contains(&"request.id") && logged.contains(&"http.route"));
        assert!(
            !logged.iter().any(|name| name.starts_with("otel.")),
            "{logged:?}"
        );
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
        let exporting =
            crate::telemetry::subscriber("info", crate::config::LogFormat::Text, Some(&provider))
                .expect("subscriber");
        let exported = fields(&exporting);
        for name in [
            "otel.name",
            "otel.kind",
            "http.response.status_code",
            "request.id",
        ] {
            assert!(exported.contains(&name), "{name} missing from {exported:?}");
        }
    }
}
