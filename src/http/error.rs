//! The error envelope of WIRE.md §3: every failed request answers
//! `{"error": "<message>", "code": "<CODE>"}` with the matching status (a 403 adds the
//! `rule_id` that refused). Kernel errors are mapped
//! through their [`ErrorCode`]; 5xx bodies never carry internal details (the cause is logged here,
//! once, inside the request's span).

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use keel_actors::error::ErrorCode;
use keel_actors::kernel::KernelError;
use serde::Serialize;

/// A failed request, as the client sees it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// 400 `VALIDATION_ERROR`; the message is sent as is (`validation error: ...`).
    #[error("{0}")]
    BadRequest(String),
    /// 401 `UNAUTHORIZED`; the message is sent as is.
    #[error("{0}")]
    Unauthorized(String),
    /// 403 `FORBIDDEN` with the `rule_id` that refused (WIRE.md §3.4: the SDK raises
    /// `PolicyError(error, rule_id=rule_id)`); the message is sent as is.
    #[error("{message}")]
    Forbidden {
        /// What refused: `hook:<id>` for a `pre_create` hook.
        rule_id: String,
        /// Why.
        message: String,
    },
    /// 404 `NOT_FOUND`; the message is sent as is.
    #[error("{0}")]
    NotFound(String),
    /// 409 `CONFLICT`; the message is sent as is.
    #[error("{0}")]
    Conflict(String),
    /// 415 `UNSUPPORTED_MEDIA_TYPE`; the message is sent as is.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// 429 `RATE_LIMITED` with `Retry-After: <seconds>`; the message is sent as is.
    #[error("{0}")]
    RateLimited(String, u64),
    /// 503 `SERVICE_UNAVAILABLE`; the message is sent as is (it must not be internal detail).
    #[error("{0}")]
    Unavailable(String),
    /// 500 `INTERNAL_ERROR`; the cause is logged and the client sees `internal error`.
    #[error("internal error: {0}")]
    Internal(String),
}

impl ApiError {
    /// Returns a 400 with the `validation error: <detail>` message shape of WIRE.md §3.3.
    pub fn validation(detail: impl std::fmt::Display) -> Self {
        Self::BadRequest(format!("validation error: {detail}"))
    }

    /// Returns the status and wire code of this error.
    pub fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            Self::BadRequest(_) => (StatusCode::BAD_REQUEST, "VALIDATION_ERROR"),
            Self::Unauthorized(_) => (StatusCode::UNAUTHORIZED, "UNAUTHORIZED"),
            Self::Forbidden { .. } => (StatusCode::FORBIDDEN, "FORBIDDEN"),
            Self::NotFound(_) => (StatusCode::NOT_FOUND, "NOT_FOUND"),
            Self::Conflict(_) => (StatusCode::CONFLICT, "CONFLICT"),
            Self::UnsupportedMediaType(_) => {
                (StatusCode::UNSUPPORTED_MEDIA_TYPE, "UNSUPPORTED_MEDIA_TYPE")
            }
            Self::RateLimited(..) => (StatusCode::TOO_MANY_REQUESTS, "RATE_LIMITED"),
            Self::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "SERVICE_UNAVAILABLE"),
            Self::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL_ERROR"),
        }
    }
}

impl From<KernelError> for ApiError {
    fn from(error: KernelError) -> Self {
        let message = error.to_string();
        if let KernelError::HookRefused { hook_id, .. } = &error {
            return Self::Forbidden {
                rule_id: format!("hook:{hook_id}"),
                message,
            };
        }
        match error.code() {
            ErrorCode::BadRequest => Self::BadRequest(message),
            ErrorCode::Unauthorized => Self::Unauthorized(message),
            // Only a hook refusal is forbidden today (above); keep any other one a 403 too.
            ErrorCode::Forbidden => Self::Forbidden {
                rule_id: String::new(),
                message,
            },
            ErrorCode::NotFound => Self::NotFound(message),
            ErrorCode::Conflict => Self::Conflict(message),
            ErrorCode::Unavailable | ErrorCode::Timeout => {
                tracing::warn!(error = %message, "kernel unavailable");
                Self::Unavailable("service unavailable".to_owned())
            }
            ErrorCode::Internal => Self::Internal(message),
        }
    }
}

/// Body of every error response.
#[derive(Serialize)]
struct Envelope<'a> {
    error: &'a str,
    code: &'static str,
    /// On a 403 only: what refused (Keel sends it for `pre_create` hook refusals).
    #[serde(skip_serializing_if = "Option::is_none")]
    rule_id: Option<&'a str>,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        let message = match &self {
            Self::Internal(cause) => {
                tracing::error!(error = %cause, "request failed");
                "internal error"
            }
            Self::BadRequest(message)
            | Self::Unauthorized(message)
            | Self::Forbidden { message, .. }
            | Self::NotFound(message)
            | Self::Conflict(message)
            | Self::UnsupportedMediaType(message)
            | Self::RateLimited(message, _)
            | Self::Unavailable(message) => message.as_str(),
        };
        let retry_after = match &self {
            Self::RateLimited(_, seconds) => Some(seconds.to_string()),
            // The kernel or its database is briefly unable (an outage, a partition moving
            // between kernels): a retry after a second is the right reaction.
            Self::Unavailable(_) => Some("1".to_owned()),
            _ => None,
        };
        let rule_id = match &self {
            Self::Forbidden { rule_id, .. } if !rule_id.is_empty() => Some(rule_id.as_str()),
            _ => None,
        };
        let mut response = (
            status,
            Json(Envelope {
                error: message,
                code,
                rule_id,
            }),
        )
            .into_response();
        if let Some(seconds) = retry_after.and_then(|text| text.parse().ok()) {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, seconds);
        }
        response
    }
}

/// Answers paths no route matches.
pub async fn not_found() -> ApiError {
    ApiError::NotFound("not found".to_owned())
}

/// Gives the router's bodiless 405 the error envelope (`METHOD_NOT_ALLOWED`); the router adds
/// the `Allow` header with the path's methods. Called by the request layer on every answer
/// (`request_id.rs`): one layer per request instead of a second one for this.
pub fn method_not_allowed(method: &axum::http::Method, response: Response) -> Response {
    if response.status() != StatusCode::METHOD_NOT_ALLOWED {
        return response;
    }
    let (mut parts, _) = response.into_parts();
    let body = serde_json::json!({
        "error": format!("method {method} is not allowed on this path (the Allow header lists its methods)"),
        "code": "METHOD_NOT_ALLOWED",
    });
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    parts.headers.insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    Response::from_parts(parts, axum::body::Body::from(body.to_string()))
}
