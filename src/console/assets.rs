//! The console's static files, embedded in the binary at build time (no Node toolchain).

use axum::extract::Path;
use axum::http::HeaderValue;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};

use super::shell::harden;
use crate::http::ApiError;

const SCRIPT: &str = include_str!("assets/console.js");
const STEPS: &str = include_str!("assets/steps.js");
const STYLE: &str = include_str!("assets/console.css");

/// `GET /console/assets/{file}`.
pub async fn serve(Path(file): Path<String>) -> Response {
    let (body, content_type) = match file.as_str() {
        "console.js" => (SCRIPT, "text/javascript; charset=utf-8"),
        "steps.js" => (STEPS, "text/javascript; charset=utf-8"),
        "console.css" => (STYLE, "text/css; charset=utf-8"),
        _ => return ApiError::NotFound(format!("not found: console asset {file}")).into_response(),
    };
    let mut response = harden(body.into_response());
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}
