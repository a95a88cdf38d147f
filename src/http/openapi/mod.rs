//! The OpenAPI 3.1 document of the HTTP API, generated at compile time by utoipa from
//! [`paths`] and [`schemas`] and served at `GET /v0/openapi.json`. docs/api.md is the readable
//! companion; `tests/api/openapi.rs` keeps the document, the router and real answers in step.

mod answers;
mod cluster;
mod console;
mod feed;
mod guardrails;
mod keys;
mod llm;
mod paths;
mod protocol;
mod schemas;
mod tool_changes;

use std::sync::OnceLock;

use axum::http::HeaderValue;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use utoipa::Modify;
use utoipa::OpenApi;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};

/// The document's definition: every documented route and every component schema.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Keel",
        description = "HTTP + SSE API of the Keel execution kernel (the rebuno v0 wire protocol). \
            Every path also answers with a trailing slash where WIRE.md §1.4 says so. Every \
            failed request answers the `Error` envelope.",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    paths(
        paths::health, paths::ready, paths::metrics, paths::openapi,
        paths::create_execution, paths::list_executions, paths::get_execution,
        paths::cancel_execution, paths::signal_execution, paths::reconcile_step,
        paths::execution_events,
        paths::execution_stream, feed::feed_page, feed::feed_stream,
        paths::agent_stream, paths::agent_intent, paths::agent_step_result,
        paths::runner_stream, paths::step_started, paths::step_progress, paths::unregister_runner,
        tool_changes::runner, tool_changes::report_tool_changes, tool_changes::accept_tool_changes,
        paths::runner_result, paths::runner_capabilities, paths::publish_tools, paths::tools,
        console::approvals, console::execution_counts, console::agents, console::runners,
        console::policy, cluster::cluster,
        guardrails::breakers,
        keys::list_keys, keys::create_key, keys::rotate_key, keys::revoke_key,
        keys::answer_approval, keys::answer_approvals,
        llm::chat_completions, llm::embeddings, llm::messages, llm::unknown_get,
        llm::unknown_post, llm::unknown_put, llm::unknown_patch, llm::unknown_delete,
        llm::mcp_post, llm::mcp_get, llm::mcp_delete,
    ),
    components(schemas(
        schemas::Error, schemas::ErrorCode, schemas::Status, schemas::ExecutionStatus,
        schemas::Execution, schemas::ExecutionSummary, schemas::ExecutionList, schemas::Event,
        schemas::EventPage, schemas::CreateExecution, schemas::Signal, schemas::Reconcile,
        schemas::IntentType,
        schemas::IntentFields, schemas::Intent, schemas::IntentAnswer,
        schemas::AgentStepResult, schemas::RunnerResult, schemas::StepStarted, schemas::StepProgress,
        schemas::PublishedTool, schemas::PublishTools, schemas::Capabilities, schemas::Tool,
        schemas::ExecutionAssigned, schemas::JobAssigned, feed::FeedEvent, feed::FeedPage,
        schemas::SseMessage,
        tool_changes::ToolChange, tool_changes::ToolChangeReport, tool_changes::ToolChangeAccept,
        tool_changes::ToolChangesAccepted, tool_changes::RunnerView,
        console::Approval, console::ApprovalList, console::ExecutionCounts, console::Connection,
        console::Agent, console::AgentList, console::Runner, console::RunnerList,
        console::ReloadOutcome, console::Policy, cluster::Cluster, cluster::ClusterKernel,
        guardrails::BreakerList, guardrails::Breaker, guardrails::BudgetView,
        guardrails::BudgetUsed,
        keys::KeyScopes, keys::NewKey, keys::Key, keys::KeyList, keys::IssuedKey, keys::RevokedKey,
        keys::ApprovalAnswer, keys::ApprovalAnswers, keys::AnsweredApproval,
        keys::ApprovalAnswered, keys::ApprovalOutcome, keys::ApprovalOutcomes,
    )),
    modifiers(&BearerAuth),
    security(("bearer" = [])),
)]
pub struct ApiDoc;

/// Declares the `bearer` security scheme the document's `security` refers to.
struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
    }
}

/// Returns the document as JSON (built once).
pub fn document() -> &'static str {
    static DOCUMENT: OnceLock<String> = OnceLock::new();
    DOCUMENT.get_or_init(|| {
        let mut openapi = ApiDoc::openapi();
        openapi.info.version = env!("CARGO_PKG_VERSION").to_owned();
        openapi
            .to_json()
            .unwrap_or_else(|error| format!("{{\"error\":\"openapi: {error}\"}}"))
    })
}

/// `GET /v0/openapi.json`.
pub async fn serve() -> Response {
    let mut response = document().into_response();
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}
