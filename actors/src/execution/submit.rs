//! Intents inside the execution actor: the session and state checks, the policy verdict (in a
//! `policy` span) and the hooks, the state machine's decision and its commit, then the metrics.

use serde_json::{Value, json};
use tracing::Instrument as _;

use super::actor::ExecutionActorState;
use super::commands::{Capabilities, Intent, IntentReply};
use super::effects::apply;
use super::machine;
use crate::events::EventBody;
use crate::ids::{ExecutionId, SessionId, StepId, ToolId};
use crate::kernel::KernelError;
use crate::policy::{Decision, PolicyDecision};

pub(super) async fn submit_intent(
    state: &mut ExecutionActorState,
    session_id: &SessionId,
    session_owner: Option<&ExecutionId>,
    intent: Intent,
    capabilities: Capabilities,
) -> Result<IntentReply, KernelError> {
    machine::check_session(&state.exec, session_id, session_owner)?;
    if let Some(mut reply) = machine::precheck_intent(&state.exec, &intent)? {
        // A repeat of an accepted call: the arguments the step runs with, as the first answer.
        if capabilities.modify {
            reply.arguments = modified_arguments(state, &intent, &reply);
        }
        return Ok(reply);
    }
    if let Some(reply) = replay(state, &intent, capabilities).await? {
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
    let pre_tool = match verdict.as_mut() {
        Some(verdict) => super::hooks::pre_tool(state, &mut intent, verdict, capabilities).await?,
        None => super::hooks::PreTool::default(),
    };
    let hook_events = pre_tool.events;
    let proposed = pre_tool.proposed.as_ref();
    let reused = match verdict.as_mut() {
        Some(verdict) => reuse_grant(state, &intent, proposed, verdict),
        None => None,
    };
    let settings = state.ctx.config.execution.clone();
    let (mut transition, mut reply) = machine::proposed_intent(
        &state.exec,
        &intent,
        proposed,
        verdict.as_ref(),
        state.ctx.now(),
        &settings,
    )?;
    transition.events.splice(0..0, hook_events);
    if let Some(granted) = &reused {
        mark_reused_grant(&mut transition, granted);
    }
    apply(state, transition).await?;
    if pre_tool.modified && capabilities.modify && reply.accepted {
        // `intent` holds the hooks' arguments now: the ones the step was created with.
        if let Intent::InvokeTool {
            arguments,
            remote: false,
            ..
        } = &intent
        {
            reply.arguments = Some(arguments.clone());
        }
    }
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

/// Returns the arguments the accepted local step of `reply` runs with when they are not the
/// ones `intent` proposed (a `pre_tool` hook changed them), for an agent that applies them.
fn modified_arguments(
    state: &ExecutionActorState,
    intent: &Intent,
    reply: &IntentReply,
) -> Option<Value> {
    let Intent::InvokeTool { arguments, .. } = intent else {
        return None;
    };
    let step = state.exec.step(reply.step_id.as_ref()?)?;
    (reply.accepted && !step.remote && step.arguments != *arguments).then(|| step.arguments.clone())
}

/// Answers a remote `invoke_tool` of a re-run from the journal when an earlier run completed
/// the same call: no policy check, hook, job or charge (docs/failure-semantics.md).
/// A local call is replayed only for an agent that returns the recorded outcome instead of
/// running the tool (`Keel-Capabilities: replay`): its answer carries `replay`.
async fn replay(
    state: &mut ExecutionActorState,
    intent: &Intent,
    capabilities: Capabilities,
) -> Result<Option<IntentReply>, KernelError> {
    let (kind, transition, reply) = match intent {
        Intent::Wait { signal_type } => {
            let Some(payload) = machine::replayable_signal(&state.exec, signal_type) else {
                return Ok(None);
            };
            let transition = machine::replay_wait(&state.exec, signal_type, payload);
            ("wait", transition, IntentReply::accepted())
        }
        Intent::InvokeTool {
            tool_id,
            arguments,
            idempotency_key,
            remote,
        } => {
            let Some(entry) = machine::replayable(&state.exec, tool_id, arguments) else {
                return Ok(None);
            };
            // The rebuno SDK runs an accepted local tool itself: only a denial (nothing runs)
            // is replayed for it.
            if !*remote && !entry.approval_denied && !capabilities.replay {
                return Ok(None);
            }
            let answer = (!*remote && !entry.approval_denied).then(|| {
                json!({
                    "of_step_id": entry.step_id,
                    "status": if entry.success { "succeeded" } else { "failed" },
                    "result": entry.result,
                    "error": entry.error,
                })
            });
            if !replay_allowed(state, tool_id, arguments) {
                return Ok(None);
            }
            let call = machine::ReplayedCall {
                tool_id,
                arguments,
                key: idempotency_key.as_ref(),
                remote: *remote,
            };
            let (mut transition, mut reply) =
                machine::replay_call(&state.exec, &call, entry, state.ctx.now());
            if answer.is_some() {
                // The answer carries the outcome: no `tool.result` push for a local step.
                transition.effects.clear();
                reply.replay = answer;
            }
            let kind = if *remote { "remote" } else { "local" };
            (kind, transition, reply)
        }
        _ => return Ok(None),
    };
    apply(state, transition).await?;
    let decision = if reply.pending_approval {
        "pending_approval"
    } else {
        "accepted"
    };
    state.ctx.metrics.intent(intent.type_name(), decision);
    state.ctx.metrics.step_replayed(kind);
    super::spans::record_intent_decision(state, "replayed");
    Ok(Some(reply))
}

/// Returns whether the rule matching a call lets a re-run replay it (`then.replay`, true by
/// default). Only the rule is evaluated: no rate-limit slot, breaker or budget is touched.
fn replay_allowed(state: &ExecutionActorState, tool_id: &ToolId, arguments: &Value) -> bool {
    let input = super::hooks::policy_input(state, tool_id, arguments);
    let engine = crate::kernel::context::read(&state.ctx.policy_in_force)
        .engine
        .clone();
    engine.evaluate(&input).replay
}

/// Lets a call of a re-run that needs an approval through when the same call (tool, arguments,
/// occurrence) of an earlier run was granted one; returns the step that was granted.
fn reuse_grant(
    state: &ExecutionActorState,
    intent: &Intent,
    proposed: Option<&Value>,
    verdict: &mut PolicyDecision,
) -> Option<StepId> {
    let Intent::InvokeTool {
        tool_id, arguments, ..
    } = intent
    else {
        return None;
    };
    if verdict.decision != Decision::RequireApproval {
        return None;
    }
    let identity = proposed.unwrap_or(arguments);
    let granted = machine::reusable_grant(&state.exec, tool_id, identity)?.clone();
    verdict.decision = Decision::Allow;
    Some(granted)
}

/// Names the reused grant on the call's `intent.accepted`.
fn mark_reused_grant(transition: &mut machine::Transition, granted: &StepId) {
    for event in &mut transition.events {
        if let EventBody::IntentAccepted {
            details: Some(details),
            ..
        } = &mut event.body
        {
            details["approval_of"] = serde_json::json!(granted);
        }
    }
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
