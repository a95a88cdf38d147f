//! What a key's role and scopes allow beyond the route table: the route-level scope checks of
//! streams and runner paths (`forbidden`, run by the middleware) and the body checks the
//! handlers make (creations, agent executions, signals, runner and tool ids). Each refusal is a
//! 403 `FORBIDDEN` logged with the key's name and the reason.

use axum::extract::Request;

use crate::auth::role::{self, Access};
use crate::auth::{Principal, Role};
use crate::http::AppState;
use crate::http::error::ApiError;

/// Why `principal` may not call the route, when its role or scope says so. The body's checks
/// (an agent key's creations, a runner key's `started`) are the handlers'.
pub(super) fn forbidden(
    access: Access,
    principal: &Principal,
    request: &Request,
) -> Option<String> {
    if let Some(reason) = role::refusal(access, principal.role) {
        return Some(format!("{reason} (role {})", principal.role));
    }
    let scopes = &principal.scopes;
    match (access, principal.role) {
        (Access::AgentStream, Role::Agent) => {
            let agent = query_value(request, "agent_id").unwrap_or_default();
            (!scopes.allows_agent(&agent))
                .then(|| format!("agent id {agent:?} is outside the key's scope"))
        }
        (Access::RunnerStream, Role::Runner) => {
            let runner = query_value(request, "runner_id").unwrap_or_default();
            if !scopes.allows_runner(&runner) {
                return Some(format!("runner id {runner:?} is outside the key's scope"));
            }
            let capabilities = query_value(request, "capabilities").unwrap_or_default();
            capabilities
                .split(',')
                .map(str::trim)
                .find(|tool| !tool.is_empty() && !scopes.allows_tool(tool))
                .map(|tool| format!("tool {tool:?} is outside the key's scope"))
        }
        (Access::RunnerPath | Access::RunnerRemove, Role::Runner) => {
            let runner = path_runner(request.uri().path()).unwrap_or_default();
            (!scopes.allows_runner(&runner))
                .then(|| format!("runner id {runner:?} is outside the key's scope"))
        }
        _ => None,
    }
}

/// A 403 for what a handler found in the body, logged like the route refusals.
fn refuse(principal: &Principal, reason: String) -> ApiError {
    tracing::warn!(key = %principal.name, role = %principal.role, reason = %reason, "request forbidden");
    ApiError::Forbidden {
        rule_id: String::new(),
        message: format!("forbidden: {reason}"),
    }
}

/// A creation: an agent key only for its agents; a key with label scopes only with those
/// labels.
pub fn check_creation(
    principal: &Principal,
    agent_id: &str,
    labels: Option<&std::collections::BTreeMap<String, String>>,
) -> Result<(), ApiError> {
    if principal.role == Role::Agent && !principal.scopes.allows_agent(agent_id) {
        return Err(refuse(
            principal,
            format!("agent id {agent_id:?} is outside the key's scope"),
        ));
    }
    for (key, value) in labels.into_iter().flatten() {
        if !principal.scopes.allows_label(key, value) {
            return Err(refuse(
                principal,
                format!("label {key}={value} is outside the key's scope"),
            ));
        }
    }
    Ok(())
}

/// An agent key's intent or step result: only for executions of its agents (one read of the
/// execution, for agent keys only; an unknown execution is left to the handler's answer).
pub async fn check_agent_execution(
    state: &AppState,
    principal: &Principal,
    execution_id: &str,
) -> Result<(), ApiError> {
    if principal.role != Role::Agent || principal.scopes.agents.is_empty() {
        return Ok(());
    }
    let id = keel_actors::ids::ExecutionId::new(execution_id.to_owned());
    match state.kernel.execution(&id).await {
        Ok(row) if !principal.scopes.allows_agent(row.agent_id.as_str()) => Err(refuse(
            principal,
            format!(
                "execution {execution_id} belongs to agent {:?}, outside the key's scope",
                row.agent_id.as_str()
            ),
        )),
        _ => Ok(()),
    }
}

/// A signal: approvers send only `step.approve` and `step.deny`.
pub fn check_signal(principal: &Principal, signal_type: &str) -> Result<(), ApiError> {
    let approval = matches!(signal_type, "step.approve" | "step.deny");
    if principal.role == Role::Approver && !approval {
        return Err(refuse(
            principal,
            format!("an approver key sends only step.approve and step.deny, not {signal_type:?}"),
        ));
    }
    Ok(())
}

/// A runner key names only its runners.
pub fn check_runner(principal: &Principal, runner_id: &str) -> Result<(), ApiError> {
    if principal.role == Role::Runner && !principal.scopes.allows_runner(runner_id) {
        return Err(refuse(
            principal,
            format!("runner id {runner_id:?} is outside the key's scope"),
        ));
    }
    Ok(())
}

/// A runner key serves only its tools.
pub fn check_tool(principal: &Principal, tool_id: &str) -> Result<(), ApiError> {
    if principal.role == Role::Runner && !principal.scopes.allows_tool(tool_id) {
        return Err(refuse(
            principal,
            format!("tool {tool_id:?} is outside the key's scope"),
        ));
    }
    Ok(())
}

/// The first value of `name` in the request's query, decoded.
fn query_value(request: &Request, name: &str) -> Option<String> {
    let query = request.uri().query()?;
    url::form_urlencoded::parse(query.as_bytes())
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.into_owned())
}

/// The `{id}` of `/v0/runners/{id}/...`, decoded.
fn path_runner(path: &str) -> Option<String> {
    let segment = path.strip_prefix("/v0/runners/")?.split('/').next()?;
    Some(
        percent_encoding::percent_decode_str(segment)
            .decode_utf8_lossy()
            .into_owned(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runner_ids_are_read_from_the_path() {
        assert_eq!(
            path_runner("/v0/runners/r%201/results").as_deref(),
            Some("r 1")
        );
        assert_eq!(path_runner("/v0/runners/r1").as_deref(), Some("r1"));
        assert_eq!(path_runner("/v0/executions"), None);
    }
}
