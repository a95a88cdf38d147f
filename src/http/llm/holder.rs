//! Who may call a model for an execution: the holder of its live session, an agent key for its
//! agent, or an admin credential.

use axum::http::HeaderMap;
use keel_actors::ids::{ExecutionId, SessionId};
use keel_actors::kernel::Kernel;

use crate::auth::{Principal, Role};

/// Header naming the session that proves the caller holds the execution.
pub const SESSION_HEADER: &str = "keel-session";

/// Checks that the caller holds the execution: its live session in `Keel-Session`, an agent
/// key for its agent, or an admin credential (the bearer token or an admin key; not the
/// anonymous caller of a kernel without authentication). An agent key is never let past its
/// scope, not even with the execution's session. Returns the refusal's message.
pub(in crate::http) fn holds(
    kernel: &Kernel,
    principal: Option<&Principal>,
    headers: &HeaderMap,
    execution_id: &ExecutionId,
    agent_id: &str,
) -> Result<(), String> {
    if let Some(principal) = principal
        && principal.role == Role::Agent
        && !principal.scopes.allows_agent(agent_id)
    {
        tracing::warn!(key = %principal.name, execution.id = %execution_id, "model call refused: agent outside the key's scope");
        return Err(format!(
            "execution {execution_id} belongs to agent {agent_id:?}, outside the key's scope"
        ));
    }
    if let Some(session) = headers
        .get(SESSION_HEADER)
        .and_then(|value| value.to_str().ok())
    {
        if kernel.session_holds(&SessionId::new(session.to_owned()), execution_id) {
            return Ok(());
        }
        return Err(format!(
            "the Keel-Session header does not name the live session of execution {execution_id}"
        ));
    }
    match principal {
        Some(principal) if principal.role == Role::Admin && principal.recorded_name().is_some() => {
            Ok(())
        }
        Some(principal)
            if principal.role == Role::Agent && principal.scopes.allows_agent(agent_id) =>
        {
            Ok(())
        }
        _ => Err(format!(
            "the caller does not hold execution {execution_id}: send its session id in the \
             Keel-Session header, or use a key for agent {agent_id}"
        )),
    }
}
