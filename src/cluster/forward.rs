//! Any kernel answers any request (cluster mode): a request concerning an execution whose
//! partition another kernel holds is forwarded over HTTP to that kernel's advertised URL and its
//! answer relayed unchanged, streamed both ways (an SSE stream too). Which requests concern an
//! execution: every path under `/v0/executions/{id}`, and the agent's intent and step result,
//! whose JSON body names `execution_id`. A creation stays on this kernel when it holds a
//! partition (the id is then picked in one of them), and goes to a kernel that holds one
//! otherwise.
//!
//! A forwarded request carries `Keel-Forwarded-By: <node id>`; a kernel that receives one for a
//! partition it does not hold (the route was stale) answers 503 with `Retry-After` instead of
//! forwarding again, and so does a kernel that knows no owner or cannot reach it: never a
//! write by a kernel that does not hold the partition (the store's fence refuses those anyway).

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use keel_actors::ids::ExecutionId;

use super::{Ownership, Route};
use crate::http::ApiError;
use crate::store::partition_of;

/// The header naming the kernel a request was forwarded by.
pub const FORWARDED_BY: &str = "keel-forwarded-by";

/// How long connecting to the owner may take before the client gets a 503.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// How long the owner may take to start answering (its status and headers; a stream's body
/// may then last): a paused owner's socket still accepts connections, and the client gets a
/// 503 after this instead of waiting for it to resume.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// Most tries at an id in a held partition before giving up (with P/N held, one in N ids fits).
const ID_TRIES: usize = 4096;

/// What forwarding needs: the partitions and their owners, and an HTTP client.
#[derive(Debug)]
pub struct Routing {
    ownership: Arc<Ownership>,
    node_id: String,
    client: reqwest::Client,
    /// Largest body read to find an intent's `execution_id` (the large body limit).
    body_limit: usize,
    /// Requests forwarded, for `/metrics`.
    forwarded: std::sync::atomic::AtomicU64,
}

impl Routing {
    /// Routing for the kernel `node_id` holding `ownership`.
    pub fn new(
        ownership: Arc<Ownership>,
        node_id: &str,
        body_limit: usize,
    ) -> Result<Self, String> {
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|error| format!("cannot build the forwarding client: {error}"))?;
        Ok(Self {
            ownership,
            node_id: node_id.to_owned(),
            client,
            body_limit,
            forwarded: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// The cluster's `/metrics` families (OpenMetrics text, without `# EOF`).
    pub fn ownership(&self) -> &Arc<Ownership> {
        &self.ownership
    }

    /// The cluster's OpenMetrics families of this kernel (see [`Ownership::encode_metrics`]).
    pub fn encode_metrics(&self) -> String {
        self.ownership
            .encode_metrics(self.forwarded.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// The cluster as this kernel sees it (`GET /v0/cluster`, the console).
    pub fn view(&self) -> super::view::ClusterView {
        super::view::view(&self.ownership, &self.node_id)
    }

    /// The kernel owning the execution `id` in the last view, if any.
    pub fn owner_of_execution(&self, id: &str) -> Option<String> {
        super::view::owner_of(&self.ownership, &self.node_id, id)
    }

    /// A new execution id in a partition this kernel holds; `None` when it holds none.
    pub fn new_execution_id(&self) -> Option<ExecutionId> {
        if self.ownership.owned().is_empty() {
            return None;
        }
        let partitions = self.ownership.partitions();
        (0..ID_TRIES).map(|_| ExecutionId::generate()).find(|id| {
            self.ownership
                .epoch(partition_of(id.as_str(), partitions))
                .is_some()
        })
    }

    /// Where a request about the execution `id` goes: `None` here, or the owner to forward to.
    fn owner_of(&self, id: &str) -> Result<Option<Route>, ApiError> {
        let partition = partition_of(id, self.ownership.partitions());
        if self.ownership.epoch(partition).is_some() {
            return Ok(None);
        }
        match self.ownership.route(partition) {
            Some(route) if route.node != self.node_id => Ok(Some(route)),
            _ => Err(no_owner(partition)),
        }
    }

    /// Largest request body read here (the large body limit).
    pub fn body_limit(&self) -> usize {
        self.body_limit
    }

    /// This kernel's `--node-id`.
    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    /// The HTTP client of forwards and bridges (connect timeout, no redirects, no total
    /// timeout: streams stay open).
    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }

    /// The other live kernels of the last view, holding partitions or not yet: where
    /// consumers are bridged and runner publications copied.
    pub fn live_peers(&self) -> Vec<Route> {
        self.ownership
            .members()
            .into_iter()
            .filter(|node| node.live && node.id != self.node_id)
            .map(|node| Route {
                node: node.id,
                url: node.url,
            })
            .collect()
    }

    /// Any other kernel that holds a partition (for a creation this kernel cannot take).
    fn any_owner(&self) -> Option<Route> {
        (0..self.ownership.partitions())
            .filter_map(|partition| self.ownership.route(partition))
            .find(|route| route.node != self.node_id)
    }
}

/// 503 for a partition with no reachable owner.
fn no_owner(partition: u32) -> ApiError {
    ApiError::Unavailable(format!(
        "partition {partition} is moving between kernels; retry in a second"
    ))
}

/// The middleware: forwards what another kernel owns, runs the rest here.
pub async fn forward(
    State(routing): State<Arc<Routing>>,
    request: Request,
    next: Next,
) -> Response {
    let forwarded = request.headers().contains_key(FORWARDED_BY);
    let path = request.uri().path().to_owned();
    let method = request.method().clone();
    if method == Method::POST && !forwarded && super::publish::is_publication(&path) {
        return super::publish::publish(routing, request, next).await;
    }
    let target = if let Some(id) = execution_in_path(&path) {
        Target::Execution(id.to_owned())
    } else if method == Method::POST
        && matches!(path.as_str(), "/v0/executions" | "/v0/executions/")
    {
        Target::Creation
    } else if method == Method::POST && names_execution_in_body(&path) {
        Target::Body
    } else {
        return next.run(request).await;
    };
    let (request, id) = match target {
        Target::Execution(id) => (request, Some(id)),
        Target::Creation => {
            if !routing.ownership.owned().is_empty() || forwarded {
                return next.run(request).await;
            }
            return match routing.any_owner() {
                Some(route) => relay(&routing, route, request).await,
                None => ApiError::Unavailable(
                    "no kernel of the cluster holds a partition yet; retry in a second".to_owned(),
                )
                .into_response(),
            };
        }
        Target::Body => {
            let (parts, body) = request.into_parts();
            let Ok(bytes) = axum::body::to_bytes(body, routing.body_limit).await else {
                return ApiError::validation(
                    "the request body could not be read (or is too large)",
                )
                .into_response();
            };
            let id = execution_in_body(&bytes);
            (Request::from_parts(parts, Body::from(bytes)), id)
        }
    };
    let Some(id) = id else {
        return next.run(request).await;
    };
    match routing.owner_of(&id) {
        Ok(None) => next.run(request).await,
        // A forwarded request is not forwarded again: the sender's route was stale.
        Ok(Some(_)) if forwarded => {
            no_owner(partition_of(&id, routing.ownership.partitions())).into_response()
        }
        Ok(Some(route)) => relay(&routing, route, request).await,
        Err(error) => error.into_response(),
    }
}

/// What a request concerns.
enum Target {
    Execution(String),
    Creation,
    Body,
}

/// The execution id of a path under `/v0/executions/{id}` (not `/v0/executions/counts`).
fn execution_in_path(path: &str) -> Option<&str> {
    let rest = path.strip_prefix("/v0/executions/")?;
    let id = rest.split('/').next()?;
    (!id.is_empty() && id != "counts").then_some(id)
}

/// The `execution_id` of a JSON body, if it has a string one.
/// Whether a POST to `path` names its execution in the body: intents, step results, runner
/// results, runner step starts and MCP progress reports.
fn names_execution_in_body(path: &str) -> bool {
    if matches!(path, "/v0/agents/intent" | "/v0/agents/step-result") {
        return true;
    }
    let Some(rest) = path.strip_prefix("/v0/runners/") else {
        return false;
    };
    let parts: Vec<&str> = rest.split('/').collect();
    matches!(parts.as_slice(), [runner, "results"] if !runner.is_empty())
        || matches!(parts.as_slice(), ["steps", step, "started" | "progress"] if !step.is_empty())
}

fn execution_in_body(bytes: &Bytes) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Named {
        execution_id: Option<serde_json::Value>,
    }
    let named: Named = serde_json::from_slice(bytes).ok()?;
    match named.execution_id? {
        serde_json::Value::String(id) if !id.is_empty() => Some(id),
        _ => None,
    }
}

/// Headers that belong to one connection and are never relayed.
fn hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "transfer-encoding"
            | "te"
            | "trailer"
            | "upgrade"
            | "host"
            | "content-length"
    )
}

/// Sends `request` to `route` and relays its answer, streaming both bodies.
async fn relay(routing: &Routing, route: Route, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let path = parts.uri.path_and_query().map_or_else(
        || parts.uri.path().to_owned(),
        |path| path.as_str().to_owned(),
    );
    let url = format!("{}{path}", route.url);
    routing
        .forwarded
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut headers = HeaderMap::new();
    for (name, value) in &parts.headers {
        if !hop_by_hop(name) && name.as_str() != FORWARDED_BY {
            headers.append(name.clone(), value.clone());
        }
    }
    if let Ok(value) = HeaderValue::from_str(&routing.node_id) {
        headers.insert(HeaderName::from_static(FORWARDED_BY), value);
    }
    let send = routing
        .client
        .request(parts.method, &url)
        .headers(headers)
        .body(reqwest::Body::wrap_stream(body.into_data_stream()))
        .send();
    let sent = tokio::time::timeout(ANSWER_TIMEOUT, send).await;
    let answer = match sent {
        Ok(Ok(answer)) => answer,
        Err(_) => {
            tracing::warn!(owner = %route.node, "the owning kernel did not answer a forwarded request in time");
            return ApiError::Unavailable(format!(
                "the kernel owning this execution ({}) did not answer in time; retry in a second",
                route.node
            ))
            .into_response();
        }
        Ok(Err(error)) => {
            tracing::warn!(owner = %route.node, error = %error, "forwarding to the owning kernel failed");
            return ApiError::Unavailable(format!(
                "the kernel owning this execution ({}) cannot be reached; retry in a second",
                route.node
            ))
            .into_response();
        }
    };
    let mut response = Response::builder().status(answer.status());
    if let Some(headers) = response.headers_mut() {
        for (name, value) in answer.headers() {
            if !hop_by_hop(name) {
                headers.append(name.clone(), value.clone());
            }
        }
    }
    let built = response.body(Body::from_stream(answer.bytes_stream()));
    built
        .unwrap_or_else(|_| {
            ApiError::Internal("relaying the owner's answer failed".to_owned()).into_response()
        })
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_execution_of_a_path() {
        assert_eq!(execution_in_path("/v0/executions/abc"), Some("abc"));
        assert_eq!(execution_in_path("/v0/executions/abc/"), Some("abc"));
        assert_eq!(execution_in_path("/v0/executions/abc/stream"), Some("abc"));
        assert_eq!(execution_in_path("/v0/executions/counts"), None);
        assert_eq!(execution_in_path("/v0/executions/"), None);
        assert_eq!(execution_in_path("/v0/executions"), None);
        assert_eq!(execution_in_path("/v0/events"), None);
    }

    #[test]
    fn the_execution_of_a_body() {
        let body = Bytes::from_static(br#"{"execution_id": "e-1", "intent": {}}"#);
        assert_eq!(execution_in_body(&body), Some("e-1".to_owned()));
        assert_eq!(execution_in_body(&Bytes::from_static(b"{}")), None);
        assert_eq!(execution_in_body(&Bytes::from_static(b"not json")), None);
        assert_eq!(
            execution_in_body(&Bytes::from_static(br#"{"execution_id": 3}"#)),
            None
        );
    }

    #[test]
    fn the_posts_that_name_their_execution_in_the_body() {
        for path in [
            "/v0/agents/intent",
            "/v0/agents/step-result",
            "/v0/runners/r-1/results",
            "/v0/runners/steps/s-1/started",
            "/v0/runners/steps/s-1/progress",
        ] {
            assert!(names_execution_in_body(path), "{path}");
        }
        for path in [
            "/v0/runners/stream",
            "/v0/runners//results",
            "/v0/runners/r-1/capabilities",
            "/v0/runners/steps//started",
            "/v0/agents/stream",
            "/v0/executions",
        ] {
            assert!(!names_execution_in_body(path), "{path}");
        }
    }
}
