//! Intents inside the execution actor: the session and state checks, the policy verdict (in a
//! `policy` span) and the hooks, the state machine's decision and its commit, then the metrics.

use serde_json::Value;
use tracing::Instrument as _;

use super::actor::ExecutionActorState;
use super::commands::{Intent, IntentReply};
use super::effects::apply;
use super::machine;
use crate::ids::{ExecutionId, SessionId, ToolId};
use crate::kernel::KernelError;
use crate::policy::PolicyDecision;

pub(super) async fn submit_intent(
    state: &mut ExecutionActorState,
    session_id: &SessionId,
    session_owner: Option<&ExecutionId>,
    intent: Intent,
) -> Result<IntentReply, KernelError> {
    machine::check_session(&state.exec, session_id, session_owner)?;
    if let Some(reply) = machine::precheck_intent(&state.exec, &intent)? {
        return Ok(reply);
    }
    if let Some(reply) = replay(state, &intent).await? {
        return Ok(reply);
    }
    let mut intent = intent;
    let mut verdict = match &intent {
        Intent::InvokeTool {
            tool_id,
            arguments,
            remote,
            ..
        } => Some(check_policy(state, tool_id, arguments, *remote).await?),
        _ => None,
    };
    let hook_events = match verdict.as_mut() {
        Some(verdict) => super::hooks::pre_tool(state, &mut intent, verdict).await?,
        None => Vec::new(),
    };
    let settings = state.ctx.config.execution.clone();
    let (mut transition, reply) = machine::intent(
        &state.exec,
        &intent,
        verdict.as_ref(),
        state.ctx.now(),
        &settings,
    )?;
    transition.events.splice(0..0, hook_events);
    apply(state, transition).await?;
    let denial = verdict.as_ref().and_then(PolicyDecision::denial);
    let decision = match denial {
        _ if reply.pending_approval => "pending_approval",
        Some(kind) if !reply.accepted => kind.intent_decision(),
        _ if !reply.accepted => "denied",
        _ => "accepted",
    };
    state.ctx.metrics.intent(intent.type_name(), decision);
    super::spans::record_intent_decision(state, decision);
    match &intent {
        Intent::Complete { .. } => state.ctx.metrics.execution_outcome("completed"),
        Intent::Fail { .. } => state.ctx.metrics.execution_outcome("failed"),
        _ => {}
    }
    Ok(reply)
}

/// Answers a remote `invoke_tool` of a re-run from the journal when an earlier run completed
/// the same call: no policy check, hook, job or charge (docs/failure-semantics.md).
async fn replay(
    state: &mut ExecutionActorState,
    intent: &Intent,
) -> Result<Option<IntentReply>, KernelError> {
    let Intent::InvokeTool {
        tool_id,
        arguments,
        idempotency_key,
        remote: true,
    } = intent
    else {
        return Ok(None);
    };
    let Some(entry) = machine::replayable(&state.exec, tool_id, arguments) else {
        return Ok(None);
    };
    let call = machine::ReplayedCall {
        tool_id,
        arguments,
        key: idempotency_key.as_ref(),
        remote: true,
    };
    let (transition, reply) = machine::replay_call(&state.exec, &call, entry, state.ctx.now());
    apply(state, transition).await?;
    state.ctx.metrics.intent(intent.type_name(), "accepted");
    state.ctx.metrics.step_replayed("remote");
    super::spans::record_intent_decision(state, "replayed");
    Ok(Some(reply))
}

/// Puts `events` (the hooks' decisions) before the transition's own events.
pub(super) fn with_first(
    mut transition: machine::Transition,
    events: Vec<crate::events::NewEvent>,
) -> machine::Transition {
    transition.events.splice(0..0, events);
    transition
}

async fn check_policy(
    state: &ExecutionActorState,
    tool_id: &ToolId,
    arguments: &Value,
    remote: bool,
) -> Result<PolicyDecision, KernelError> {
    let span = super::spans::policy_span(state, tool_id);
    let verdict = super::policy_check::check_policy(state, tool_id, arguments, remote)
        .instrument(span.clone())
        .await?;
    super::spans::record_verdict(&span, &verdict);
    Ok(verdict)
}
