//! The MCP server side of `/v0/executions/{id}/mcp` (rmcp's `ServerHandler`).
//!
//! `tools/list` is the kernel's tool directory less the tools the policy denies to the bound
//! execution whatever the arguments (`PolicyEngine::evaluate_any_arguments`); `tools/call` is an `invoke_tool` intent of that execution
//! (so policy, hooks, approvals, budgets, breakers, dispatch and the journal all apply) and
//! answers once the step has an outcome. Nothing here decides about a call.

use std::collections::BTreeMap;
use std::time::Duration;

use keel_actors::events::EventBody;
use keel_actors::execution::{Capabilities, Intent};
use keel_actors::ids::{ExecutionId, StepId, ToolId};
use keel_actors::kernel::{CommitNotice, Kernel};
use keel_actors::policy::{Decision, PolicyInput};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{Map, Value};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::AppState;
use super::mcp::McpBinding;

/// Events read per page while looking for a step's outcome.
const PAGE: i64 = 256;
/// How often the log is read again without a commit notice (the notices are a hint).
const POLL: Duration = Duration::from_secs(1);

/// One MCP request's server: the HTTP state; the binding comes with each request.
#[derive(Clone)]
pub struct KeelMcp {
    state: AppState,
}

impl KeelMcp {
    /// Returns a server over `state`.
    pub fn new(state: AppState) -> Self {
        Self { state }
    }
}

/// Reads the binding `mcp.rs` put on the HTTP request.
fn binding(context: &RequestContext<RoleServer>) -> Result<McpBinding, McpError> {
    context
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<McpBinding>())
        .cloned()
        .ok_or_else(|| McpError::internal_error("the request is not bound to an execution", None))
}

impl ServerHandler for KeelMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("keel", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Keel's governed tools, called in one execution: every call is a policy-checked, \
                 recorded step, and may wait for a human approval.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let binding = binding(&context)?;
        let kernel = &self.state.kernel;
        let row = kernel
            .execution(&binding.execution_id)
            .await
            .map_err(|error| McpError::internal_error(error.to_string(), None))?;
        let engine = kernel.policy_engine();
        let labels: BTreeMap<String, String> = row.labels.as_deref().cloned().unwrap_or_default();
        let now = keel_actors::time::now();
        let tools = kernel
            .tools("")
            .into_iter()
            .filter(|entry| {
                let input = PolicyInput {
                    action: "tool.invoke".to_owned(),
                    agent_id: row.agent_id.clone(),
                    tool_id: entry.id.clone(),
                    execution_id: row.id.clone(),
                    labels: labels.clone(),
                    arguments: Value::Object(Map::new()),
                    step_count: 0,
                    duration_ms: 0,
                    usage: Default::default(),
                    now,
                    created_by: None,
                    on_behalf_of: None,
                };
                // Hidden only when denied whatever the arguments; a call is still decided on
                // its own arguments.
                engine.evaluate_any_arguments(&input).decision != Decision::Deny
            })
            .map(|entry| {
                let schema = match entry.input_schema {
                    Value::Object(schema) if !schema.is_empty() => schema,
                    _ => {
                        let mut schema = Map::new();
                        schema.insert("type".to_owned(), Value::from("object"));
                        schema
                    }
                };
                let description = match entry.description {
                    Value::String(text) => text,
                    Value::Null => String::new(),
                    other => other.to_string(),
                };
                Tool::new(entry.id.into_string(), description, schema)
            })
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let binding = binding(&context)?;
        let kernel = &self.state.kernel;
        let tool_id = request.name.to_string();
        if tool_id.is_empty() || tool_id.len() > 256 {
            return Err(McpError::invalid_params(
                "the tool name must have 1 to 256 bytes",
                None,
            ));
        }
        let arguments = request
            .arguments
            .map_or(Value::Object(Map::new()), Value::Object);
        // Subscribed before the intent, so that no commit of the step is missed.
        let commits = kernel.subscribe_commits();
        let start = kernel
            .execution(&binding.execution_id)
            .await
            .map_err(|error| McpError::internal_error(error.to_string(), None))?
            .last_sequence;
        let intent = Intent::InvokeTool {
            tool_id: ToolId::new(tool_id),
            arguments,
            idempotency_key: None,
            remote: true,
        };
        let reply = kernel
            .submit_intent_with(
                &binding.execution_id,
                &binding.session_id,
                intent,
                Capabilities::default(),
            )
            .await
            .map_err(|error| McpError::invalid_request(error.to_string(), None))?;
        let step_id = match (reply.accepted, reply.step_id) {
            (true, Some(step_id)) => step_id,
            (_, _) => {
                // Refused before any step: the policy's (or a hook's, a budget's) reason.
                let reason = reply
                    .error
                    .unwrap_or_else(|| "the call was refused".to_owned());
                return Ok(CallToolResult::error(vec![ContentBlock::text(reason)]).into());
            }
        };
        super::request_id::record("step.id", step_id.as_str());
        let outcome = wait_for_step(
            kernel,
            &binding.execution_id,
            &step_id,
            start,
            commits,
            &context.ct,
        )
        .await?;
        Ok(match outcome {
            Ok(result) => success(result),
            Err(error) => CallToolResult::error(vec![ContentBlock::text(error)]),
        }
        .into())
    }
}

/// The MCP result of a step's result: a string as text; an object also as structured content.
fn success(result: Value) -> CallToolResult {
    match result {
        Value::String(text) => CallToolResult::success(vec![ContentBlock::text(text)]),
        Value::Object(object) => {
            let text = Value::Object(object.clone()).to_string();
            let mut answer = CallToolResult::success(vec![ContentBlock::text(text)]);
            answer.structured_content = Some(Value::Object(object));
            answer
        }
        other => CallToolResult::success(vec![ContentBlock::text(other.to_string())]),
    }
}

/// Reads the execution's log from `after` until `step_id` has an outcome: `Ok(result)` when it
/// completed, `Err(text)` when it failed for good, was cancelled, or its outcome became
/// unknown, or when the execution ended first. A retried failure is waited through.
async fn wait_for_step(
    kernel: &Kernel,
    execution_id: &ExecutionId,
    step_id: &StepId,
    mut after: i64,
    mut commits: broadcast::Receiver<CommitNotice>,
    cancel: &CancellationToken,
) -> Result<Result<Value, String>, McpError> {
    loop {
        let events = kernel
            .events(execution_id, after, PAGE)
            .await
            .map_err(|error| McpError::internal_error(error.to_string(), None))?;
        let full = events.len() as i64 == PAGE;
        for event in events {
            after = event.sequence;
            if event.body.is_terminal() {
                return Ok(Err(format!(
                    "execution {execution_id} ended ({}) before the call had an outcome",
                    event.body.type_name()
                )));
            }
            if event.step_id.as_ref() != Some(step_id) {
                continue;
            }
            match event.body {
                EventBody::StepCompleted { result, .. } => return Ok(Ok(result)),
                EventBody::StepFailed {
                    error,
                    retryable: false,
                    ..
                } => return Ok(Err(error)),
                EventBody::StepCancelled { reason } => {
                    return Ok(Err(format!("the step was cancelled: {reason}")));
                }
                EventBody::StepOutcomeUnknown { reason, .. } => {
                    return Ok(Err(format!(
                        "the step's outcome is unknown ({reason}); an operator reconciles it"
                    )));
                }
                _ => {}
            }
        }
        if full {
            continue;
        }
        let notice = async {
            loop {
                match commits.recv().await {
                    Ok(notice) if notice.execution_id != *execution_id => {}
                    // A notice for this execution, or some were missed: read the log again.
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => return,
                    Err(broadcast::error::RecvError::Closed) => {
                        std::future::pending::<()>().await;
                    }
                }
            }
        };
        tokio::select! {
            () = notice => {}
            () = tokio::time::sleep(POLL) => {}
            () = cancel.cancelled() => {
                return Err(McpError::internal_error(
                    format!("the client stopped waiting; step {step_id} goes on in the execution"),
                    None,
                ));
            }
        }
    }
}
