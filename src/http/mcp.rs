//! `/v0/executions/{id}/mcp`: Keel as an MCP server (Streamable HTTP, docs/mcp.md).
//!
//! An MCP client reaches the kernel's tool directory through one execution. This handler
//! checks that the caller holds the execution (its live session in `Keel-Session`, or an agent
//! key for its agent, as the LLM gateway does), answers a refusal with the usual JSON error,
//! and hands the request to rmcp's Streamable HTTP service with the binding in the request's
//! extensions. The MCP side (`mcp_server.rs`) turns `tools/list` and `tools/call` into the
//! kernel's own operations: every call is an `invoke_tool` intent of that execution.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use keel_actors::ids::{ExecutionId, SessionId};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use super::AppState;
use super::error::ApiError;
use super::llm::{SESSION_HEADER, holds};
use crate::auth::Principal;

pub use super::mcp_server::KeelMcp;

/// What an MCP request is bound to, checked before rmcp sees the request.
#[derive(Clone, Debug)]
pub struct McpBinding {
    /// The execution whose tools the client sees and in which its calls run.
    pub execution_id: ExecutionId,
    /// The session the intents are sent in (the header's, else the execution's current one).
    pub session_id: SessionId,
}

/// `POST|GET|DELETE /v0/executions/{id}/mcp`.
pub async fn endpoint(
    State(state): State<AppState>,
    Path(id): Path<String>,
    mut request: Request,
) -> Response {
    // Read before any await: a request body is not `Sync`, so a borrowed request is not `Send`.
    let principal = request.extensions().get::<Principal>().cloned();
    let headers = request.headers().clone();
    let binding = match bind(&state, &id, principal.as_ref(), &headers).await {
        Ok(binding) => binding,
        Err(error) => return error.into_response(),
    };
    super::request_id::record("execution.id", &id);
    request.extensions_mut().insert(binding);
    let config = StreamableHttpServerConfig::default()
        // One request, one answer: no MCP session to keep (the execution is the state).
        .with_legacy_session_mode(false)
        // Keel checks Host, origins and credentials itself (auth.rs, CORS).
        .disable_allowed_hosts()
        .with_max_request_body_bytes(state.settings.large_body_limit)
        .with_cancellation_token(state.shutdown.child_token());
    let factory_state = state.clone();
    let service = StreamableHttpService::new(
        move || Ok(KeelMcp::new(factory_state.clone())),
        Arc::new(NeverSessionManager::default()),
        config,
    );
    service.handle(request).await.map(Body::new)
}

/// Checks the execution and the caller's hold on it, and picks the session of its intents.
async fn bind(
    state: &AppState,
    id: &str,
    principal: Option<&Principal>,
    headers: &HeaderMap,
) -> Result<McpBinding, ApiError> {
    let execution_id = ExecutionId::new(id.to_owned());
    let row = state.kernel.execution(&execution_id).await?;
    if row.status.is_terminal() {
        return Err(ApiError::Conflict(format!(
            "execution {id} has finished ({}); its tools can no longer be called",
            row.status.as_str()
        )));
    }
    holds(
        &state.kernel,
        principal,
        headers,
        &execution_id,
        row.agent_id.as_str(),
    )
    .map_err(|message| ApiError::Forbidden {
        rule_id: "not_execution_holder".to_owned(),
        message,
    })?;
    let from_header = headers
        .get(SESSION_HEADER)
        .and_then(|value| value.to_str().ok())
        .map(|session| SessionId::new(session.to_owned()));
    let Some(session_id) = from_header.or(row.session_id) else {
        return Err(ApiError::Conflict(format!(
            "execution {id} is not running (no agent holds it): its tools are called in its \
             agent's session"
        )));
    };
    Ok(McpBinding {
        execution_id,
        session_id,
    })
}
