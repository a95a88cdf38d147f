//! Authentication (docs/security.md), authorization by route and role, and CORS (WIRE.md §1.3),
//! as middleware in front of every route.
//!
//! A kernel needs credentials once it has a `--bearer-token` or any API key that is not
//! revoked; until then (`keel dev`) every request acts as the admin `anonymous`. With
//! credentials required, every route but `GET /v0/health`, `GET /v0/ready` and the console's
//! public pages needs exactly one `Authorization: Bearer <token>` header (the scheme matched
//! case-insensitively, RFC 7235): the `--bearer-token` (compared in constant time) acts as the
//! admin `admin`; an API key is looked up in memory by its public id and its secret's hash
//! compared in constant time (`crate::auth`). Anything else — a second `Authorization`
//! header included — is 401 with `WWW-Authenticate: Bearer` before the handler runs, so an SSE
//! request with a bad key gets the JSON envelope, never a stream. An authenticated key whose role
//! or scope does not allow the route is 403 `FORBIDDEN`. Every refusal is logged with the key's
//! name (never the secret), the route and the reason; failures are limited per client address
//! (`crate::auth::failures`). The principal goes to the handler as a request extension, and a
//! stream opened with a key ends when the key is revoked, rotated or expires. The scope checks
//! (the middleware's and the handlers') are in `auth/checks.rs`, CORS in `auth/cors.rs`.
//!
//! With CORS origins configured every response carries the CORS headers and any `OPTIONS`
//! request is answered 204 before authentication. All of it runs inside the request-id
//! middleware (`request_id.rs`), one layer for all three: each layer of axum's `from_fn` boxes
//! the request's future and clones the routes behind it.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::Request;
use axum::http::header::{AUTHORIZATION, CONNECTION, CONTENT_TYPE, WWW_AUTHENTICATE};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::StreamExt as _;
use subtle::ConstantTimeEq;

use super::AppState;
use super::error::ApiError;
use crate::auth::failures::Verdict;
use crate::auth::role::{self, Access};
use crate::auth::{Principal, Rejected};

mod checks;
mod cors;

use checks::forbidden;
pub use checks::{check_agent_execution, check_creation, check_runner, check_signal, check_tool};
pub use cors::{add_cors, cors_for};

/// Authenticates and authorizes `request` (`route` is its matched path, or its raw path when
/// no route matched). `Ok(Some(principal))` when a key or the token was checked (the principal
/// is also in the request's extensions), `Ok(None)` when nothing was required, `Err` with the
/// answer (204 preflight, 401, 403, 429, 503) otherwise.
pub async fn authenticate(
    state: &AppState,
    request: &mut Request,
    route: &str,
) -> Result<Option<Principal>, Response> {
    if !state.settings.cors_origins.is_empty() && request.method() == Method::OPTIONS {
        return Err(StatusCode::NO_CONTENT.into_response());
    }
    let access = role::access(request.method(), route);
    let public = request.method() == Method::GET
        && (access == Access::Public || crate::console::is_public(request.uri().path()));
    if public {
        return Ok(None);
    }
    if state.settings.bearer_token.is_none() {
        if let Err(error) = state.keys.ensure_loaded().await {
            tracing::warn!(error = %error, "reading API keys failed");
            return Err(ApiError::Unavailable("API keys cannot be read".to_owned()).into_response());
        }
        if !state.keys.has_keys() {
            return Ok(None);
        }
    }
    let principal = match identify(state, request.headers()).await {
        Ok(principal) => principal,
        Err((reason, key)) => {
            return Err(refuse_unauthenticated(state, request, route, reason, key));
        }
    };
    if let Some(reason) = forbidden(access, &principal, request) {
        tracing::warn!(
            key = %principal.name,
            role = %principal.role,
            route = %route,
            method = %request.method(),
            reason = %reason,
            "request forbidden"
        );
        return Err(ApiError::Forbidden {
            rule_id: String::new(),
            message: format!("forbidden: {reason}"),
        }
        .into_response());
    }
    request.extensions_mut().insert(principal.clone());
    Ok(Some(principal))
}

/// Why a 401: the reason logged and sent, and the key's name when it is known.
type Unauthenticated = (&'static str, Option<Arc<str>>);

/// Finds who the `Authorization` header names.
async fn identify(state: &AppState, headers: &HeaderMap) -> Result<Principal, Unauthenticated> {
    let token = match bearer(headers) {
        Bearer::Missing => return Err(("missing bearer token", None)),
        Bearer::Ambiguous => return Err(("more than one Authorization header", None)),
        Bearer::Malformed => return Err(("not a bearer token", None)),
        Bearer::Token(token) => token,
    };
    if let Some(expected) = state.settings.bearer_token.as_deref()
        && !expected.is_empty()
        && bool::from(token.as_bytes().ct_eq(expected.as_bytes()))
    {
        return Ok(Principal::bearer_token());
    }
    if crate::auth::key::parse(token).is_none() {
        return Err((Rejected::Unknown.as_str(), None));
    }
    if let Err(error) = state.keys.ensure_loaded().await {
        tracing::warn!(error = %error, "reading API keys failed");
        return Err(("API keys cannot be read", None));
    }
    state
        .keys
        .authenticate_fresh(token)
        .await
        .map_err(|(rejected, name)| (rejected.as_str(), name))
}

/// The 401 (or, past the failure limit of the client's address, 429) of a request whose
/// credentials were refused, logged unless the limit silenced it; it closes the connection.
fn refuse_unauthenticated(
    state: &AppState,
    request: &Request,
    route: &str,
    reason: &'static str,
    key: Option<Arc<str>>,
) -> Response {
    let client = super::serve::client().map(|address| address.ip());
    let verdict = match client {
        Some(ip) => state.auth_failures.record(ip, Instant::now()),
        None => Verdict::Log,
    };
    let key = key.as_deref().unwrap_or("-");
    let client_text = client.map_or_else(|| "-".to_owned(), |ip| ip.to_string());
    match verdict {
        Verdict::Log => tracing::warn!(
            key = %key,
            route = %route,
            method = %request.method(),
            client = %client_text,
            reason = %reason,
            "authentication failed"
        ),
        Verdict::Throttle { log: true, .. } | Verdict::Quiet { log: true } => tracing::warn!(
            client = %client_text,
            route = %route,
            limit = crate::auth::failures::LIMIT,
            window_s = crate::auth::failures::WINDOW.as_secs(),
            "authentication failing repeatedly from this address; its failures are not logged for the rest of the window"
        ),
        Verdict::Throttle { log: false, .. } | Verdict::Quiet { log: false } => {}
    }
    let mut response = match verdict {
        Verdict::Throttle { retry_after, .. } => ApiError::RateLimited(
            "too many failed authentication attempts from this address".to_owned(),
            retry_after,
        )
        .into_response(),
        Verdict::Log | Verdict::Quiet { .. } => {
            ApiError::Unauthorized(unauthorized_message(reason)).into_response()
        }
    };
    if response.status() == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"keel\""),
        );
    }
    // The connection ends with the answer, and says so (its body is never read; issue 38).
    response
        .headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("close"));
    response
}

/// The message of a 401: `unauthorized`, naming the reason only for a key whose secret was
/// right (revoked or expired), so that a guess learns nothing.
fn unauthorized_message(reason: &str) -> String {
    if reason == Rejected::Revoked.as_str() || reason == Rejected::Expired.as_str() {
        format!("unauthorized: {reason}")
    } else {
        "unauthorized".to_owned()
    }
}

/// What the `Authorization` headers hold.
#[derive(Debug, PartialEq, Eq)]
enum Bearer<'a> {
    /// None.
    Missing,
    /// More than one: ambiguous credentials are never accepted.
    Ambiguous,
    /// One, not of the form `Bearer <token>` (scheme in any case, RFC 7235).
    Malformed,
    /// One bearer token.
    Token(&'a str),
}

/// Reads the one `Authorization: Bearer <token>` header.
fn bearer(headers: &HeaderMap) -> Bearer<'_> {
    let mut values = headers.get_all(AUTHORIZATION).iter();
    let value = match (values.next(), values.next()) {
        (None, _) => return Bearer::Missing,
        (Some(_), Some(_)) => return Bearer::Ambiguous,
        (Some(value), None) => value,
    };
    let Ok(text) = value.to_str() else {
        return Bearer::Malformed;
    };
    match text.split_once(' ') {
        Some((scheme, token))
            if scheme.eq_ignore_ascii_case("bearer")
                && !token.is_empty()
                && !token.contains(' ') =>
        {
            Bearer::Token(token)
        }
        _ => Bearer::Malformed,
    }
}

/// Ends a streaming response when the key that opened it is revoked, rotated or expires; other
/// responses, and those of the bearer token or an open kernel, are returned as they are.
pub fn bind_stream(principal: Option<Principal>, response: Response) -> Response {
    let Some(principal) = principal else {
        return response;
    };
    if principal.revoked.is_none() && principal.expires_at.is_none() {
        return response;
    }
    let streaming = response
        .headers()
        .get(CONTENT_TYPE)
        .is_some_and(|value| value.as_bytes().starts_with(b"text/event-stream"));
    if !streaming {
        return response;
    }
    let (parts, body) = response.into_parts();
    let ended = async move { principal.invalidated().await };
    let body = Body::from_stream(body.into_data_stream().take_until(ended));
    Response::from_parts(parts, body)
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
    fn the_bearer_scheme_is_matched_in_any_case() {
        for good in [
            "Bearer s3cret",
            "bearer s3cret",
            "BEARER s3cret",
            "bEaReR s3cret",
        ] {
            assert_eq!(
                bearer(&with_authorization(good)),
                Bearer::Token("s3cret"),
                "{good}"
            );
        }
        for bad in [
            "Bearer  s3cret",
            "Basic s3cret",
            "s3cret",
            "Bearer ",
            "Bearer s3cret x",
        ] {
            assert_eq!(bearer(&with_authorization(bad)), Bearer::Malformed, "{bad}");
        }
        assert_eq!(bearer(&HeaderMap::new()), Bearer::Missing);
    }

    #[test]
    fn a_second_authorization_header_is_never_accepted() {
        for second in ["Bearer s3cret", "Bearer other", "Basic x", ""] {
            let mut headers = with_authorization("Bearer s3cret");
            headers.append(AUTHORIZATION, HeaderValue::from_str(second).unwrap());
            assert_eq!(bearer(&headers), Bearer::Ambiguous, "{second:?}");
        }
    }
}
