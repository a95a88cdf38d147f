//! Bearer authentication (WIRE.md §2) and CORS (§1.3), as middleware in front of every route.
//!
//! With a token configured every route but `GET /v0/health` and `GET /v0/ready` needs exactly
//! one `Authorization: Bearer <token>` header (capital B, one space, byte-for-byte equal,
//! compared in constant time); anything else, including a second `Authorization` header next
//! to a valid one, is 401 before the handler runs, so an SSE request with a bad token gets the
//! JSON envelope, never a stream. With CORS origins configured every response
//! carries the CORS headers and any `OPTIONS` request is answered 204 before authentication.
//! Both run inside the request-id middleware (`request_id.rs`), one layer for all three: each
//! layer of axum's `from_fn` boxes the request's future and clones the routes behind it.

use axum::extract::Request;
use axum::http::header::{
    ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS, ACCESS_CONTROL_ALLOW_ORIGIN,
    ACCESS_CONTROL_MAX_AGE, AUTHORIZATION, ORIGIN, VARY,
};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use super::AppState;
use super::error::ApiError;

/// Paths reachable without a token (only with `GET`).
const EXEMPT_PATHS: [&str; 2] = ["/v0/health", "/v0/ready"];

/// Answers a request before its handler when authentication or CORS says so: `OPTIONS` with
/// 204 when CORS origins are configured (before authentication), and 401 when a token is
/// configured and the request does not carry it. `None` lets the handler run.
pub fn answer_early(state: &AppState, request: &Request) -> Option<Response> {
    if !state.settings.cors_origins.is_empty() && request.method() == Method::OPTIONS {
        return Some(StatusCode::NO_CONTENT.into_response());
    }
    let token = state.settings.bearer_token.as_deref()?;
    let exempt = request.method() == Method::GET
        && (EXEMPT_PATHS.contains(&request.uri().path())
            || crate::console::is_public(request.uri().path()));
    if exempt || authorized(request.headers(), token) {
        return None;
    }
    Some(ApiError::Unauthorized("unauthorized".to_owned()).into_response())
}

/// Returns whether `headers` carry `Authorization: Bearer <token>` and no other
/// `Authorization` header: ambiguous credentials are never accepted.
fn authorized(headers: &HeaderMap, token: &str) -> bool {
    let mut values = headers.get_all(AUTHORIZATION).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return false;
    };
    let Some(given) = value.as_bytes().strip_prefix(b"Bearer ") else {
        return false;
    };
    // Different lengths compare unequal (and only the length leaks, as with any comparison).
    !token.is_empty() && bool::from(given.ct_eq(token.as_bytes()))
}

/// The CORS headers a response to a request with `headers` carries: `None` when no origins are
/// configured. Read before the request goes to its handler, added to whatever it answers
/// ([`add_cors`]), the early answers of [`answer_early`] included.
pub fn cors_for(state: &AppState, headers: &HeaderMap) -> Option<Cors> {
    let origins = &state.settings.cors_origins;
    if origins.is_empty() {
        return None;
    }
    Some(Cors {
        allow_origin: allowed_origin(origins, headers),
    })
}

/// The CORS answer of one request (`cors_for`).
pub struct Cors {
    allow_origin: Option<HeaderValue>,
}

/// Adds the CORS headers of `cors` to `response`.
pub fn add_cors(cors: Cors, response: &mut Response) {
    let headers = response.headers_mut();
    if let Some(origin) = cors.allow_origin {
        if origin != "*" {
            headers.append(VARY, HeaderValue::from_static("Origin"));
        }
        headers.insert(ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    }
    headers.insert(
        ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, POST, PUT, DELETE, OPTIONS"),
    );
    headers.insert(
        ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static("Content-Type, Authorization, X-Request-ID"),
    );
    headers.insert(ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("86400"));
}

/// Returns the `Access-Control-Allow-Origin` value for a request: `*` when any origin is
/// allowed, else the request's origin when it is configured.
fn allowed_origin(origins: &[String], headers: &HeaderMap) -> Option<HeaderValue> {
    if origins.iter().any(|origin| origin == "*") {
        return Some(HeaderValue::from_static("*"));
    }
    let origin = headers.get(ORIGIN)?;
    let text = origin.to_str().ok()?;
    origins
        .iter()
        .any(|allowed| allowed == text)
        .then(|| origin.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_authorization(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn only_the_exact_bearer_form_is_accepted() {
        assert!(authorized(&with_authorization("Bearer s3cret"), "s3cret"));
        for bad in [
            "bearer s3cret",
            "Bearer  s3cret",
            "Basic s3cret",
            "s3cret",
            "Bearer ",
            "Bearer s3cre",
            "Bearer s3cret ",
        ] {
            assert!(!authorized(&with_authorization(bad), "s3cret"), "{bad}");
        }
        assert!(!authorized(&HeaderMap::new(), "s3cret"));
    }

    #[test]
    fn a_second_authorization_header_is_never_accepted() {
        for second in ["Bearer s3cret", "Bearer other", "Basic x", ""] {
            let mut headers = with_authorization("Bearer s3cret");
            headers.append(AUTHORIZATION, HeaderValue::from_str(second).unwrap());
            assert!(!authorized(&headers, "s3cret"), "{second:?}");
        }
    }

    #[test]
    fn origins_are_echoed_only_when_configured() {
        let mut headers = HeaderMap::new();
        headers.insert(ORIGIN, HeaderValue::from_static("https://a.example"));
        let any = vec!["*".to_owned()];
        assert_eq!(
            allowed_origin(&any, &headers),
            Some(HeaderValue::from_static("*"))
        );
        let listed = vec!["https://a.example".to_owned()];
        assert_eq!(
            allowed_origin(&listed, &headers),
            Some(HeaderValue::from_static("https://a.example"))
        );
        let other = vec!["https://b.example".to_owned()];
        assert_eq!(allowed_origin(&other, &headers), None);
    }
}
