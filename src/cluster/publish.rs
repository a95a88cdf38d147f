//! Runner publications in cluster mode: `POST /v0/runners/{id}/tools`, `…/capabilities`,
//! `…/tool-changes` and `…/tool-changes/accept` change what one kernel keeps in memory (the
//! tool directory, a runner's capabilities, its pending MCP tool changes and their
//! acceptances), so the kernel receiving one applies it and then sends the same request to
//! every other live kernel, holding partitions or not yet (marked `Keel-Forwarded-By`, so it
//! goes no further), waiting at most [`PEER_TIMEOUT`]. An agent then finds a runner's tools
//! through any kernel. A kernel that joins later gets them from the runner's bridge, which
//! sends the runner's tools to each peer before opening its stream there
//! (`bridge::Prelude`).

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tracing::warn;

use super::forward::{FORWARDED_BY, Routing};
use crate::http::ApiError;

/// Bound of the copies sent to the other kernels.
const PEER_TIMEOUT: Duration = Duration::from_secs(2);

/// Whether a POST to `path` is a runner publication that every kernel must see.
pub fn is_publication(path: &str) -> bool {
    let Some(rest) = path.strip_prefix("/v0/runners/") else {
        return false;
    };
    let parts: Vec<&str> = rest.split('/').collect();
    matches!(
        parts.as_slice(),
        [runner, "tools" | "capabilities" | "tool-changes"] | [runner, "tool-changes", "accept"]
            if !runner.is_empty() && *runner != "steps"
    )
}

/// Runs the publication here, then copies it to the other kernels when it succeeded.
pub async fn publish(routing: Arc<Routing>, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, routing.body_limit()).await else {
        return ApiError::validation("the request body could not be read (or is too large)")
            .into_response();
    };
    let path_and_query = parts
        .uri
        .path_and_query()
        .map_or_else(|| parts.uri.path().to_owned(), ToString::to_string);
    let mut headers = reqwest::header::HeaderMap::new();
    for name in [
        axum::http::header::AUTHORIZATION,
        axum::http::header::CONTENT_TYPE,
    ] {
        if let Some(value) = parts.headers.get(&name) {
            headers.insert(name, value.clone());
        }
    }
    if let Ok(node) = HeaderValue::from_str(routing.node_id()) {
        headers.insert(HeaderName::from_static(FORWARDED_BY), node);
    }
    let response = next
        .run(Request::from_parts(parts, Body::from(bytes.clone())))
        .await;
    if response.status().is_success() {
        copy_to_peers(&routing, &path_and_query, headers, bytes).await;
    }
    response
}

async fn copy_to_peers(
    routing: &Routing,
    path_and_query: &str,
    headers: reqwest::header::HeaderMap,
    bytes: Bytes,
) {
    let sends = routing.live_peers().into_iter().map(|peer| {
        let url = format!("{}{path_and_query}", peer.url.trim_end_matches('/'));
        let sent = routing
            .client()
            .post(url)
            .headers(headers.clone())
            .body(bytes.clone())
            .send();
        async move {
            match tokio::time::timeout(PEER_TIMEOUT, sent).await {
                Ok(Ok(answer)) if answer.status().is_success() => {}
                Ok(Ok(answer)) => {
                    warn!(peer = %peer.node, status = answer.status().as_u16(), "a runner publication was refused by another kernel")
                }
                Ok(Err(error)) => {
                    warn!(peer = %peer.node, error = %error, "a runner publication did not reach another kernel")
                }
                Err(_) => {
                    warn!(peer = %peer.node, "a runner publication timed out at another kernel")
                }
            }
        }
    });
    futures::future::join_all(sends).await;
}

#[cfg(test)]
mod tests {
    use super::is_publication;

    #[test]
    fn runner_publications() {
        assert!(is_publication("/v0/runners/r-1/tools"));
        assert!(is_publication("/v0/runners/r-1/capabilities"));
        assert!(is_publication("/v0/runners/r-1/tool-changes"));
        assert!(is_publication("/v0/runners/r-1/tool-changes/accept"));
        assert!(!is_publication("/v0/runners/r-1/tool-changes/other"));
        assert!(!is_publication("/v0/runners/r-1/results"));
        assert!(!is_publication("/v0/runners//tools"));
        assert!(!is_publication("/v0/runners/stream"));
        assert!(!is_publication("/v0/runners/steps/tools"));
        assert!(!is_publication("/v0/tools"));
    }
}
