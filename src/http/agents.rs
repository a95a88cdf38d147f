//! Agent routes: the agent stream (WIRE.md §10.1), intents (§9) and local step results (§11.1).
//!
//! The handlers check what WIRE.md assigns to the handler (required fields and lengths, in
//! §9.2 step 1 order); session, state and type checks belong to the execution actor.

use axum::Json;
use axum::extract::{RawQuery, Request, State};
use axum::response::Response;
use keel_actors::execution::{Capabilities, Intent, IntentReply, StepOutcome};
use keel_actors::ids::{AgentId, ConsumerId, ExecutionId, SessionId, StepId, ToolId};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::AppState;
use super::body::read_json;
use super::error::ApiError;
use super::executions::check_length;
use super::query::QueryParams;
use super::sse;
use crate::console::StreamRole;

#[derive(Deserialize)]
struct IntentRequest {
    execution_id: Option<String>,
    session_id: Option<String>,
    intent: Option<IntentFields>,
}

/// The `intent` object: every field of every type, all optional (WIRE.md §9.1).
#[derive(Deserialize)]
struct IntentFields {
    #[serde(rename = "type")]
    intent_type: Option<String>,
    tool_id: Option<String>,
    arguments: Option<Value>,
    idempotency_key: Option<String>,
    remote: Option<bool>,
    output: Option<Value>,
    error: Option<String>,
    signal_type: Option<String>,
}

/// Body of an intent answer (WIRE.md §9.3): absent rather than null or false.
#[derive(Serialize)]
pub struct IntentBody {
    accepted: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    step_id: Option<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pending_approval: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    /// The arguments a `pre_tool` hook gave a local tool (Keel addition, only for an agent that
    /// sent `Keel-Capabilities: modify`).
    #[serde(skip_serializing_if = "Option::is_none")]
    arguments: Option<Value>,
    /// The recorded outcome of a local call an earlier run completed (Keel addition, only for
    /// an agent that sent `Keel-Capabilities: replay`): return it, do not run the tool.
    #[serde(skip_serializing_if = "Option::is_none")]
    replay: Option<Value>,
}

impl From<IntentReply> for IntentBody {
    fn from(reply: IntentReply) -> Self {
        Self {
            accepted: reply.accepted,
            step_id: reply.step_id.map(StepId::into_string),
            pending_approval: reply.pending_approval,
            error: reply.error.filter(|error| !error.is_empty()),
            arguments: reply.arguments,
            replay: reply.replay,
        }
    }
}

/// The header in which a Keel SDK says what it does beyond the rebuno protocol.
pub const CAPABILITIES_HEADER: &str = "keel-capabilities";

/// Reads the request's `Keel-Capabilities` (none when absent or not text).
fn capabilities_of(request: &Request) -> Capabilities {
    request
        .headers()
        .get_all(CAPABILITIES_HEADER)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .fold(Capabilities::default(), |known, value| {
            let more = Capabilities::parse(value);
            Capabilities {
                modify: known.modify || more.modify,
                replay: known.replay || more.replay,
            }
        })
}

#[derive(Deserialize)]
struct StepResultRequest {
    execution_id: Option<String>,
    session_id: Option<String>,
    step_id: Option<String>,
    success: Option<bool>,
    data: Option<Value>,
    error: Option<String>,
    /// What the call cost (Keel addition): an object of numbers per unit.
    cost: Option<Value>,
}

/// `GET /v0/agents/stream?agent_id=&consumer_id=`: the agent's push stream.
pub async fn stream(
    State(state): State<AppState>,
    RawQuery(raw): RawQuery,
    headers: axum::http::HeaderMap,
) -> Result<Response, ApiError> {
    let query = QueryParams::parse(raw.as_deref(), &[])?;
    let (Some(agent_id), Some(consumer_id)) = (query.get("agent_id"), query.get("consumer_id"))
    else {
        return Err(ApiError::validation(
            "agent_id and consumer_id query params are required",
        ));
    };
    check_length("agent_id", agent_id)?;
    check_length("consumer_id", consumer_id)?;
    let pushes = state
        .kernel
        .connect_agent(AgentId::new(agent_id), ConsumerId::new(consumer_id))
        .await?;
    tracing::debug!(
        agent.id = agent_id,
        consumer.id = consumer_id,
        "agent stream opened"
    );
    let presence = state
        .presence
        .connected(StreamRole::Agent, agent_id, consumer_id, Vec::new());
    // Cluster mode: the consumer is connected to the other kernels too.
    let bridge = crate::cluster::bridge::Bridge::for_stream(
        state.settings.cluster.as_ref(),
        "/v0/agents/stream",
        raw.as_deref(),
        &headers,
        None,
    );
    Ok(sse::push_response(
        &state,
        sse::StreamKind::Agent,
        pushes,
        presence,
        bridge,
    ))
}

/// `POST /v0/agents/intent`.
pub async fn intent(
    State(state): State<AppState>,
    request: Request,
) -> Result<Json<IntentBody>, ApiError> {
    let principal = super::keys::principal_of(&request);
    let capabilities = capabilities_of(&request);
    let body: IntentRequest = read_json(
        request,
        state.settings.large_body_limit,
        state.settings.body_read_timeout,
    )
    .await?;
    let execution_id = body.execution_id.unwrap_or_default();
    if execution_id.is_empty() {
        return Err(ApiError::validation("execution_id is required"));
    }
    let session_id = body.session_id.unwrap_or_default();
    if session_id.is_empty() {
        return Err(ApiError::validation("session_id is required"));
    }
    let Some(fields) = body.intent else {
        return Err(ApiError::validation("intent.type is required"));
    };
    super::text::refuse_nul_in(&[
        ("execution_id", Some(execution_id.as_str())),
        ("session_id", Some(session_id.as_str())),
        ("intent.idempotency_key", fields.idempotency_key.as_deref()),
    ])?;
    super::auth::check_agent_execution(&state, &principal, &execution_id).await?;
    super::request_id::record("execution.id", &execution_id);
    if let Some(tool_id) = &fields.tool_id {
        super::request_id::record("tool.id", tool_id);
    }
    let intent = to_intent(fields)?;
    let reply = state
        .kernel
        .submit_intent_with(
            &ExecutionId::new(execution_id),
            &SessionId::new(session_id),
            intent,
            capabilities,
        )
        .await?;
    if let Some(step_id) = &reply.step_id {
        super::request_id::record("step.id", step_id.as_str());
    }
    Ok(Json(reply.into()))
}

/// Checks the handler's part of an intent (type present, lengths) and builds the command.
fn to_intent(fields: IntentFields) -> Result<Intent, ApiError> {
    let intent_type = fields.intent_type.unwrap_or_default();
    if intent_type.is_empty() {
        return Err(ApiError::validation("intent.type is required"));
    }
    let tool_id = fields.tool_id.unwrap_or_default();
    check_length("tool_id", &tool_id)?;
    let signal_type = fields.signal_type.unwrap_or_default();
    check_length("signal_type", &signal_type)?;
    // `error` over 4096 bytes is truncated by the kernel, not rejected (Corrections item 8).
    // A missing type-specific field is passed on as `Invalid`: the kernel refuses it only after
    // its session and state checks (WIRE.md §9.2 step 6).
    let intent = match intent_type.as_str() {
        "invoke_tool" if tool_id.is_empty() => Intent::Invalid {
            intent_type,
            message: "tool_id is required for invoke_tool".to_owned(),
        },
        "invoke_tool" => Intent::InvokeTool {
            tool_id: ToolId::new(tool_id),
            arguments: fields.arguments.unwrap_or(Value::Null),
            idempotency_key: fields.idempotency_key.filter(|key| !key.is_empty()),
            remote: fields.remote.unwrap_or(false),
        },
        "complete" => Intent::Complete {
            output: fields.output,
        },
        "fail" => Intent::Fail {
            error: fields.error,
        },
        "wait" if signal_type.is_empty() => Intent::Invalid {
            intent_type,
            message: "signal_type is required for wait".to_owned(),
        },
        "wait" => Intent::Wait { signal_type },
        _ => Intent::Unknown { intent_type },
    };
    Ok(intent)
}

/// `POST /v0/agents/step-result`: the agent reports the outcome of a (local) step.
pub async fn step_result(
    State(state): State<AppState>,
    request: Request,
) -> Result<Json<Value>, ApiError> {
    let principal = super::keys::principal_of(&request);
    let capabilities = capabilities_of(&request);
    let body: StepResultRequest = read_json(
        request,
        state.settings.large_body_limit,
        state.settings.body_read_timeout,
    )
    .await?;
    let execution_id = body.execution_id.unwrap_or_default();
    let session_id = body.session_id.unwrap_or_default();
    let step_id = body.step_id.unwrap_or_default();
    if execution_id.is_empty() || session_id.is_empty() || step_id.is_empty() {
        return Err(ApiError::validation(
            "execution_id, session_id, and step_id are required",
        ));
    }
    super::text::refuse_nul_in(&[
        ("execution_id", Some(execution_id.as_str())),
        ("session_id", Some(session_id.as_str())),
        ("step_id", Some(step_id.as_str())),
    ])?;
    super::auth::check_agent_execution(&state, &principal, &execution_id).await?;
    let cost =
        keel_actors::guardrails::budget::parse_cost(body.cost.as_ref().unwrap_or(&Value::Null))
            .map_err(ApiError::validation)?;
    let outcome = StepOutcome {
        step_id: StepId::new(step_id),
        success: body.success.unwrap_or(false),
        data: body.data,
        error: body.error,
        retryable: false,
        cost,
    };
    let reply = state
        .kernel
        .agent_step_result_with(
            &ExecutionId::new(execution_id),
            &SessionId::new(session_id),
            outcome,
            capabilities,
        )
        .await?;
    // A post_tool hook failed the step: the agent must not use the result it holds (the
    // failure is recorded; a 403 makes the rebuno SDK raise instead of returning it).
    if let Some((hook_id, reason)) = reply.failed_by_hook {
        return Err(ApiError::Forbidden {
            rule_id: format!("hook:{hook_id}"),
            message: format!("step failed by hook {hook_id}: {reason}"),
        });
    }
    let mut answer = json!({ "status": "ok" });
    if let Some(result) = reply.result {
        answer["result"] = result;
    }
    Ok(Json(answer))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(value: Value) -> IntentFields {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn intents_map_to_commands() {
        let intent = to_intent(fields(
            json!({"type": "invoke_tool", "tool_id": "t", "remote": true}),
        ))
        .unwrap();
        assert_eq!(
            intent,
            Intent::InvokeTool {
                tool_id: "t".into(),
                arguments: Value::Null,
                idempotency_key: None,
                remote: true
            }
        );
        assert_eq!(
            to_intent(fields(json!({"type": "complete"}))).unwrap(),
            Intent::Complete { output: None }
        );
        assert_eq!(
            to_intent(fields(json!({"type": "fail", "error": ""}))).unwrap(),
            Intent::Fail {
                error: Some(String::new())
            }
        );
        assert_eq!(
            to_intent(fields(json!({"type": "dance"}))).unwrap(),
            Intent::Unknown {
                intent_type: "dance".into()
            }
        );
        assert!(matches!(
            to_intent(fields(json!({"type": "invoke_tool"}))).unwrap(),
            Intent::Invalid { .. }
        ));
        assert!(matches!(
            to_intent(fields(json!({"type": "wait", "signal_type": ""}))).unwrap(),
            Intent::Invalid { .. }
        ));
    }

    #[test]
    fn lengths_are_checked_regardless_of_type() {
        let long = "x".repeat(257);
        let error = to_intent(fields(json!({"type": "complete", "tool_id": long}))).unwrap_err();
        assert_eq!(
            error.to_string(),
            "validation error: tool_id exceeds maximum length of 256 characters"
        );
        let error =
            to_intent(fields(json!({"type": "complete", "signal_type": long}))).unwrap_err();
        assert_eq!(
            error.to_string(),
            "validation error: signal_type exceeds maximum length of 256 characters"
        );
        let long_error = "e".repeat(5000);
        assert!(to_intent(fields(json!({"type": "fail", "error": long_error}))).is_ok());
    }
}
