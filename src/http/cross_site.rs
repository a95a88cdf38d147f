//! Requests a browser may send from another site without asking first (issue 38, item 3): a
//! form POST, a `text/plain` body, a body-less POST, an `<img>` pointing at a stream. None of
//! them may change anything or open a consumer stream, even on a kernel without a token:
//!
//! - a POST (the only state-changing method a browser sends cross-site without a preflight;
//!   PUT, PATCH and DELETE always get one) needs `Content-Type: application/json`, which a
//!   browser sends cross-site only after a CORS preflight, else 415
//!   `UNSUPPORTED_MEDIA_TYPE` (the rebuno SDK, `keel` and the console always send it); one
//!   without a body may instead carry a header no browser sends without a preflight
//!   (`Authorization`, `Keel-Client`, MCP's `Mcp-Session-Id`);
//! - a request the browser marks cross-site (`Sec-Fetch-Site: cross-site` or `same-site`) is
//!   403 unless its `Origin` is one the CORS settings allow (an `<img>` or a navigation sends
//!   none, so an `<img>` on a consumer stream opens nothing); without Fetch Metadata (older
//!   browsers) an `Origin` that is neither allowed nor the kernel's own is 403.

use axum::extract::Request;
use axum::http::header::{
    AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, HOST, ORIGIN, TRANSFER_ENCODING,
};
use axum::http::{HeaderMap, HeaderName, HeaderValue};

use super::AppState;
use super::error::ApiError;

/// The Fetch Metadata header naming the relation of the requesting site to the kernel.
static SEC_FETCH_SITE: HeaderName = HeaderName::from_static("sec-fetch-site");

/// Headers that prove a body-less request was not sent cross-site without a preflight.
static PREFLIGHTED: [HeaderName; 3] = [
    AUTHORIZATION,
    HeaderName::from_static("keel-client"),
    HeaderName::from_static("mcp-session-id"),
];

/// Refuses `request` when the browser marks it cross-site and its origin is not allowed (every
/// route; the content type is checked by the POST handlers, [`require_json`]). A browser too
/// old to send Fetch Metadata is judged by its `Origin` alone: an allowed CORS origin or the
/// kernel's own (the one naming the request's `Host`, which [`super::hosts`] checked).
pub fn check(state: &AppState, request: &Request) -> Result<(), ApiError> {
    let headers = request.headers();
    let origin = headers.get(ORIGIN).and_then(|origin| origin.to_str().ok());
    let refused = match headers.get(&SEC_FETCH_SITE) {
        Some(site) => {
            matches!(site.as_bytes(), b"cross-site" | b"same-site")
                && !origin.is_some_and(|origin| cors_allows(state, origin))
        }
        None => origin.is_some_and(|origin| {
            !cors_allows(state, origin) && !is_own(origin, headers.get(HOST))
        }),
    };
    if refused {
        return Err(ApiError::Forbidden {
            rule_id: String::new(),
            message:
                "forbidden: a cross-site request from an origin the CORS settings do not allow"
                    .to_owned(),
        });
    }
    Ok(())
}

/// Whether `--cors-origins` allows `origin`.
fn cors_allows(state: &AppState, origin: &str) -> bool {
    state
        .settings
        .cors_origins
        .iter()
        .any(|allowed| allowed == "*" || allowed == origin)
}

/// Whether `origin` (`scheme://host[:port]`) names the request's `Host` (default ports aside).
fn is_own(origin: &str, host: Option<&HeaderValue>) -> bool {
    let Some(host) = host.and_then(|host| host.to_str().ok()) else {
        return false;
    };
    let Some((scheme, authority)) = origin.split_once("://") else {
        return false;
    };
    let default_port = match scheme.to_ascii_lowercase().as_str() {
        "http" => ":80",
        "https" => ":443",
        _ => return false,
    };
    let strip = |text: &str| {
        let text = text.trim().to_ascii_lowercase();
        match text.strip_suffix(default_port) {
            Some(bare) => bare.to_owned(),
            None => text,
        }
    };
    strip(authority) == strip(host)
}

/// Refuses a POST whose handler runs (so an unrouted method still gets its 405) unless it says
/// `Content-Type: application/json` or, without a body, carries a header only a preflighted
/// request can carry.
pub fn require_json(headers: &HeaderMap) -> Result<(), ApiError> {
    let bodiless = !headers.contains_key(TRANSFER_ENCODING)
        && headers
            .get(CONTENT_LENGTH)
            .is_none_or(|length| length.as_bytes() == b"0");
    let proven = bodiless && PREFLIGHTED.iter().any(|name| headers.contains_key(name));
    if !proven && !is_json(headers.get(CONTENT_TYPE).map(|value| value.as_bytes())) {
        return Err(ApiError::UnsupportedMediaType(
            "Content-Type must be application/json".to_owned(),
        ));
    }
    Ok(())
}

/// Whether a `Content-Type` value is `application/json` (any case, any parameters).
fn is_json(value: Option<&[u8]>) -> bool {
    let Some(value) = value else {
        return false;
    };
    let essence = value.split(|&byte| byte == b';').next().unwrap_or_default();
    essence
        .trim_ascii()
        .eq_ignore_ascii_case(b"application/json")
}

#[cfg(test)]
mod tests {
    use super::{HeaderValue, is_json, is_own};

    #[test]
    fn the_own_origin_names_the_host() {
        let host = HeaderValue::from_static("127.0.0.1:8080");
        assert!(is_own("http://127.0.0.1:8080", Some(&host)));
        assert!(!is_own("http://127.0.0.1:8081", Some(&host)));
        assert!(!is_own("http://evil.example:8080", Some(&host)));
        assert!(!is_own("null", Some(&host)));
        let named = HeaderValue::from_static("Keel.Example");
        assert!(is_own("https://keel.example", Some(&named)));
        assert!(is_own("http://keel.example:80", Some(&named)));
        assert!(!is_own("https://keel.example", None));
    }

    #[test]
    fn only_application_json_is_json() {
        for good in [
            &b"application/json"[..],
            b"Application/JSON; charset=utf-8",
            b" application/json ",
        ] {
            assert!(is_json(Some(good)), "{}", String::from_utf8_lossy(good));
        }
        for bad in [
            &b"text/plain"[..],
            b"application/x-www-form-urlencoded",
            b"multipart/form-data",
            b"application/jsonx",
            b"application/json-seq",
            b"",
        ] {
            assert!(!is_json(Some(bad)), "{}", String::from_utf8_lossy(bad));
        }
        assert!(!is_json(None));
    }
}
