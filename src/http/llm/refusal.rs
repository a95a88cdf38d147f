//! Refusals in the wire format of the route's provider, so that each official client raises its
//! usual exception.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use keel_actors::kernel::KernelError;
use serde_json::json;
use tracing::warn;

use crate::gateway::Format;

/// Longest provider error message kept on `llm.called`, in bytes.
const MAX_ERROR_BYTES: usize = 512;

/// An error in the wire format of `format`: OpenAI's `{"error": {"message", "type", "code",
/// "param"}}` or Anthropic's `{"type": "error", "error": {"type", "message"}}` (with `code`).
pub(super) fn refusal(
    format: Format,
    status: StatusCode,
    kind: &str,
    code: &str,
    message: &str,
) -> Response {
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

pub(super) fn invalid(format: Format, status: StatusCode, code: &str, message: &str) -> Response {
    refusal(format, status, "invalid_request_error", code, message)
}

pub(super) fn finished(format: Format, id: &str) -> Response {
    invalid(
        format,
        StatusCode::CONFLICT,
        "execution_finished",
        &format!("execution {id} has finished; its LLM calls are closed"),
    )
}

pub(super) fn unavailable(format: Format, error: &KernelError) -> Response {
    warn!(error = %error, "LLM gateway: reading the execution failed");
    refusal(
        format,
        StatusCode::SERVICE_UNAVAILABLE,
        "server_error",
        "unavailable",
        "the kernel cannot read the execution now; retry",
    )
}

pub(super) fn truncate(text: &str) -> String {
    if text.len() <= MAX_ERROR_BYTES {
        return text.to_owned();
    }
    let mut end = MAX_ERROR_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}
