//! CORS (WIRE.md §1.3): with origins configured, every response carries the CORS headers.

use axum::http::header::{
    ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS, ACCESS_CONTROL_ALLOW_ORIGIN,
    ACCESS_CONTROL_MAX_AGE, ORIGIN, VARY,
};
use axum::http::{HeaderMap, HeaderValue};
use axum::response::Response;

use crate::http::AppState;

/// The CORS headers a response to a request with `headers` carries: `None` when no origins are
/// configured. Read before the request goes to its handler, added to whatever it answers
/// ([`add_cors`]), the early answers (preflight, 401, 403) included.
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
