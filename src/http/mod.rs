//! The HTTP + SSE adapter of WIRE.md: routes, request decoding, the error envelope, bearer
//! authentication, CORS, request ids and the three SSE streams. Handlers only decode, call the
//! [`Kernel`] handle and encode; no handler changes state by itself.
//!
//! `main`/`run` builds one [`AppState`] and serves [`router`]; the integration tests do the same.

mod agents;
pub mod approvals;
mod auth;
mod body;
mod cluster;
pub mod creation;
mod cross_site;
pub(crate) mod cursor;
mod error;
mod execution_list;
mod execution_stream;
pub(crate) mod executions;
pub mod feed;
mod guardrails;
mod health;
pub mod hosts;
mod keys;
mod llm;
mod mcp;
mod mcp_server;
pub mod openapi;
pub mod page_bytes;
pub(crate) mod query;
mod reconcile;
mod request_id;
mod runner_progress;
mod runners;
mod serve;
mod sse;
mod step_report;
mod strict_json;
pub mod text;
pub mod tool_changes;
mod unread_body;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::middleware;
use axum::routing::{MethodRouter, delete, get, post};
use keel_actors::kernel::Kernel;
use tokio_util::sync::CancellationToken;

pub use error::ApiError;
pub use serve::{
    ConnectionTimeouts, DEFAULT_FIRST_BYTE_TIMEOUT, DEFAULT_HEADER_READ_TIMEOUT,
    DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CONNECTIONS, DEFAULT_WRITE_STALL_TIMEOUT, serve,
};

/// Default limit of ordinary request bodies (WIRE.md §1.1).
pub const DEFAULT_BODY_LIMIT: usize = 1024 * 1024;
/// Default limit of intents, step results and runner results (Corrections item 10).
pub const DEFAULT_LARGE_BODY_LIMIT: usize = 16 * 1024 * 1024;
/// Default time allowed to receive a request body (Go's read timeout).
pub const DEFAULT_BODY_READ_TIMEOUT: Duration = Duration::from_secs(60);
/// Default SSE heartbeat period (WIRE.md §8).
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(5);

/// Settings of the HTTP layer.
#[derive(Clone)]
pub struct HttpSettings {
    /// Bearer token every route but health and ready requires; `None` disables authentication.
    pub bearer_token: Option<String>,
    /// Allowed CORS origins (`*` allows any); empty disables CORS.
    pub cors_origins: Vec<String>,
    /// Body limit in bytes of create, signal and the runner administration routes.
    pub body_limit: usize,
    /// Body limit in bytes of intents, agent step results and runner results.
    pub large_body_limit: usize,
    /// Period of the `:heartbeat` comment on every SSE stream.
    pub heartbeat: Duration,
    /// Time allowed to receive a whole request body.
    pub body_read_timeout: Duration,
    /// Bounds of the pending backlog, checked by `POST /v0/executions`.
    pub backlog: creation::Backlog,
    /// Buffer and cut-off of each `GET /v0/events/stream`.
    pub feed: feed::FeedSettings,
    /// The LLM gateway (`--llm-config`); `None` leaves its routes answering 404.
    pub gateway: Option<Arc<crate::gateway::Gateway>>,
    /// Cluster mode: requests concerning an execution another kernel owns are forwarded to it.
    pub cluster: Option<Arc<crate::cluster::forward::Routing>>,
    /// Bounds of the labels of one creation.
    pub labels: text::LabelLimits,
    /// The `Host` names the kernel answers (DNS rebinding).
    pub allowed_hosts: hosts::AllowedHosts,
    /// Most bytes of events in one page (`GET /v0/events`, `GET /v0/executions/{id}/events`)
    /// and in one read of an execution or feed stream's backlog.
    pub max_page_bytes: usize,
}

impl Default for HttpSettings {
    fn default() -> Self {
        Self {
            bearer_token: None,
            cors_origins: Vec::new(),
            body_limit: DEFAULT_BODY_LIMIT,
            large_body_limit: DEFAULT_LARGE_BODY_LIMIT,
            heartbeat: DEFAULT_HEARTBEAT,
            body_read_timeout: DEFAULT_BODY_READ_TIMEOUT,
            backlog: creation::Backlog::default(),
            feed: feed::FeedSettings::default(),
            gateway: None,
            cluster: None,
            labels: text::LabelLimits::default(),
            allowed_hosts: hosts::AllowedHosts::default(),
            max_page_bytes: page_bytes::DEFAULT_MAX_PAGE_BYTES,
        }
    }
}

impl std::fmt::Debug for HttpSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpSettings")
            .field(
                "bearer_token",
                &self.bearer_token.as_ref().map(|_| "<redacted>"),
            )
            .field("cors_origins", &self.cors_origins)
            .field("body_limit", &self.body_limit)
            .field("large_body_limit", &self.large_body_limit)
            .field("heartbeat", &self.heartbeat)
            .field("body_read_timeout", &self.body_read_timeout)
            .field("gateway", &self.gateway)
            .field("labels", &self.labels)
            .field("allowed_hosts", &self.allowed_hosts)
            .finish()
    }
}

/// What every handler receives: one reference-counted pointer, since axum clones the state for
/// every request and every middleware (a clone of five `Arc`s was 2 % of the kernel's CPU under
/// the K=5, C=64 load).
#[derive(Clone)]
pub struct AppState(Arc<AppStateInner>);

/// The shared parts of [`AppState`].
pub struct AppStateInner {
    /// Handle to the actor tree.
    pub kernel: Kernel,
    /// HTTP settings.
    pub settings: HttpSettings,
    /// Cancelled when the server shuts down; every open SSE stream then ends, so that the
    /// graceful shutdown of the server does not wait for them forever.
    pub shutdown: CancellationToken,
    /// Open agent and runner streams (the directory of `GET /v0/agents`, `GET /v0/runners`).
    pub presence: Arc<crate::console::Presence>,
    /// The policy in force and the last reload attempt (`GET /v0/policy`).
    pub policy: Arc<crate::policy::PolicyStatus>,
    /// The API keys (`crate::auth`), held in memory.
    pub keys: Arc<crate::auth::KeyRegistry>,
    /// Failed authentications per client address.
    pub auth_failures: Arc<crate::auth::failures::Failures>,
    /// MCP tool-definition changes waiting for an operator, per runner.
    pub tool_changes: Arc<tool_changes::ToolChanges>,
}

impl std::ops::Deref for AppState {
    type Target = AppStateInner;

    fn deref(&self) -> &AppStateInner {
        &self.0
    }
}

impl AppState {
    /// Returns the state for `kernel` with `settings`; streams end when `shutdown` is cancelled.
    /// A task writes the keys' last use and re-reads them until `shutdown`.
    pub fn new(kernel: Kernel, settings: HttpSettings, shutdown: CancellationToken) -> Self {
        let keys = Arc::new(crate::auth::KeyRegistry::new(kernel.store().clone()));
        if settings.cluster.is_some() {
            keys.share_with_other_kernels();
        }
        tokio::spawn(keys.clone().run(shutdown.clone()));
        let tool_changes = Arc::new(tool_changes::ToolChanges::register(&kernel));
        Self(Arc::new(AppStateInner {
            tool_changes,
            keys,
            auth_failures: Arc::default(),
            kernel,
            settings,
            shutdown,
            presence: Arc::default(),
            policy: Arc::new(crate::policy::PolicyStatus::new(
                None,
                &keel_actors::policy::PermissiveEngine,
            )),
        }))
    }

    /// Replaces the policy status the HTTP layer reports (the kernel's real one). Called once,
    /// before the server starts; a state already shared keeps its own copy of the rest.
    pub fn with_policy_status(self, policy: Arc<crate::policy::PolicyStatus>) -> Self {
        let inner = &*self.0;
        Self(Arc::new(AppStateInner {
            kernel: inner.kernel.clone(),
            settings: inner.settings.clone(),
            shutdown: inner.shutdown.clone(),
            presence: inner.presence.clone(),
            policy,
            keys: inner.keys.clone(),
            auth_failures: inner.auth_failures.clone(),
            tool_changes: inner.tool_changes.clone(),
        }))
    }
}

/// The routes of the API, each path recorded as it is added, so that tests can compare the
/// router with the OpenAPI document (`tests/api/openapi.rs`). Add routes only through
/// [`Routes::route`].
pub struct Routes {
    router: Router<AppState>,
    paths: Vec<&'static str>,
}

impl Routes {
    fn new() -> Self {
        Self {
            router: Router::new(),
            paths: Vec::new(),
        }
    }

    /// Adds `method_router` at `path` and records the path.
    pub fn route(mut self, path: &'static str, method_router: MethodRouter<AppState>) -> Self {
        self.paths.push(path);
        self.router = self.router.route(path, method_router);
        self
    }

    /// Returns every routed path, in the order added (trailing-slash aliases included).
    pub fn paths(&self) -> &[&'static str] {
        &self.paths
    }
}

/// Returns every route of WIRE.md §4 (each also reachable with a trailing slash where §1.4
/// says so) and the OpenAPI document, without state or middleware.
pub fn routes() -> Routes {
    Routes::new()
        .route("/v0/health", get(health::health))
        .route("/v0/ready", get(health::ready))
        .route("/metrics", get(health::metrics))
        .route("/v0/openapi.json", get(openapi::serve))
        .route(
            "/v0/executions",
            post(executions::create).get(executions::list),
        )
        .route(
            "/v0/executions/",
            post(executions::create).get(executions::list),
        )
        .route("/v0/executions/{id}", get(executions::get))
        .route("/v0/executions/{id}/", get(executions::get))
        .route("/v0/executions/{id}/cancel", post(executions::cancel))
        .route("/v0/executions/{id}/signal", post(executions::signal))
        .route(
            "/v0/executions/{id}/steps/{step_id}/reconcile",
            post(reconcile::reconcile),
        )
        .route("/v0/executions/{id}/events", get(executions::events))
        .route(
            "/v0/executions/{id}/stream",
            get(execution_stream::execution_stream),
        )
        .route("/v0/events", get(feed::page))
        .route("/v0/events/", get(feed::page))
        .route("/v0/events/stream", get(feed::stream))
        .route("/v0/agents/stream", get(agents::stream))
        .route("/v0/agents/intent", post(agents::intent))
        .route("/v0/agents/step-result", post(agents::step_result))
        .route("/v0/runners/stream", get(runners::stream))
        .route(
            "/v0/runners/steps/{step_id}/started",
            post(runners::step_started),
        )
        .route(
            "/v0/runners/steps/{step_id}/progress",
            post(runner_progress::step_progress),
        )
        .route(
            "/v0/runners/{id}",
            get(tool_changes::show).delete(runners::unregister),
        )
        .route(
            "/v0/runners/{id}/",
            get(tool_changes::show).delete(runners::unregister),
        )
        .route("/v0/runners/{id}/tool-changes", post(tool_changes::report))
        .route(
            "/v0/runners/{id}/tool-changes/accept",
            post(tool_changes::accept),
        )
        .route("/v0/runners/{id}/results", post(runners::result))
        .route("/v0/runners/{id}/capabilities", post(runners::capabilities))
        .route("/v0/runners/{id}/tools", post(runners::publish_tools))
        .route("/v0/tools", get(runners::tools))
        .route(
            "/v0/approvals",
            get(crate::console::api::approvals).post(approvals::answer_many),
        )
        .route("/v0/approvals/{id}", post(approvals::answer_one))
        .route("/v0/executions/counts", get(crate::console::api::counts))
        .route("/v0/agents", get(crate::console::api::agents))
        .route("/v0/runners", get(crate::console::api::runners))
        .route("/v0/policy", get(crate::console::api::policy))
        .route("/v0/cluster", get(cluster::view))
        .route("/v0/breakers", get(guardrails::breakers))
        .route("/v0/breakers/", get(guardrails::breakers))
        .route("/v0/keys", get(keys::list).post(keys::create))
        .route("/v0/keys/{name}", delete(keys::revoke))
        .route("/v0/keys/{name}/rotate", post(keys::rotate))
        .route(
            "/v0/executions/{id}/llm/{provider}/v1/chat/completions",
            post(llm::chat_completions),
        )
        .route(
            "/v0/executions/{id}/llm/{provider}/v1/embeddings",
            post(llm::embeddings),
        )
        .route(
            "/v0/executions/{id}/llm/{provider}/v1/messages",
            post(llm::messages),
        )
        .route(
            "/v0/executions/{id}/llm/{provider}/{*rest}",
            get(llm::unknown_route)
                .post(llm::unknown_route)
                .put(llm::unknown_route)
                .patch(llm::unknown_route)
                .delete(llm::unknown_route),
        )
        .route(
            "/v0/executions/{id}/mcp",
            post(mcp::endpoint).get(mcp::endpoint).delete(mcp::endpoint),
        )
}

/// Builds the router of [`routes`] and the web console's pages with authentication, CORS and
/// request ids.
pub fn router(state: AppState) -> Router {
    let routes = routes()
        .router
        .merge(crate::console::pages())
        .fallback(error::not_found);
    let cluster = state.settings.cluster.clone();
    // One layer: request id, then CORS, then authentication (`request_id.rs`, `auth.rs`).
    let router = routes
        .layer(middleware::from_fn_with_state(
            state.clone(),
            request_id::request_id,
        ))
        .with_state(state);
    // Cluster mode: outermost, so a request for an execution owned elsewhere goes there as it
    // came (the owner authenticates it).
    match cluster {
        Some(routing) => router.layer(middleware::from_fn_with_state(
            routing,
            crate::cluster::forward::forward,
        )),
        None => router,
    }
}
