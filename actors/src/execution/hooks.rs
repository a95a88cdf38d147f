//! The hook chain inside the execution actor (docs/hooks.md): `pre_tool` after the policy
//! allowed an `invoke_tool`, `post_tool` when a successful step result arrives. The actor waits
//! for the hooks (each bounded by its timeout) while it holds the execution, so the hooks'
//! `hook.decided` events land in the same commit as what they decided, in order.

use serde_json::{Value, json};

use super::actor::ExecutionActorState;
use super::commands::{Capabilities, Intent, StepOutcome, StepResultReply};
use crate::events::NewEvent;
use crate::hooks::{Applier, ChainOutcome, HookPoint, HookSpec, run_chain};
use crate::ids::ToolId;
use crate::kernel::KernelError;
use crate::kernel::context::{call, read};
use crate::policy::{Decision, DenialKind, PolicyDecision, PolicyInput, PolicyMsg, RateSlot};

/// Builds the policy input of a tool call of this execution.
pub(super) fn policy_input(
    state: &ExecutionActorState,
    tool_id: &ToolId,
    arguments: &Value,
) -> PolicyInput {
    let now = state.ctx.now();
    PolicyInput {
        action: "tool.invoke".to_owned(),
        agent_id: state.exec.agent_id.clone(),
        tool_id: tool_id.clone(),
        execution_id: state.exec.id.clone(),
        labels: state.exec.labels.as_deref().cloned().unwrap_or_default(),
        arguments: arguments.clone(),
        step_count: state.exec.step_count,
        duration_ms: u64::try_from((now - state.exec.created_at).num_milliseconds()).unwrap_or(0),
        usage: state.exec.usage.clone(),
        now,
        created_by: state.exec.created_by.clone(),
        on_behalf_of: state.exec.on_behalf_of.clone(),
    }
}

pub(super) async fn ask_policy<T: Send + 'static>(
    state: &ExecutionActorState,
    message: impl FnOnce(ractor::RpcReplyPort<T>) -> PolicyMsg,
) -> Result<T, KernelError> {
    let policy = state
        .ctx
        .policy()
        .ok_or_else(|| KernelError::Unavailable("policy actor is not running".into()))?;
    call(
        &policy,
        message,
        state.ctx.config.call_timeout,
        "policy actor",
    )
    .await
}

/// Returns whether the policy in force has any hook at `point`: without one, the chain costs
/// no policy input and no round trip to the policy actor. A reload that adds hooks swaps the
/// engine read here before the policy actor's, so no call misses a hook it would have seen.
fn has_hooks(state: &ExecutionActorState, point: HookPoint) -> bool {
    read(&state.ctx.policy_in_force)
        .hooks
        .iter()
        .any(|hook| hook.point == point)
}

async fn hooks_for(
    state: &ExecutionActorState,
    point: HookPoint,
    input: PolicyInput,
    rule_id: Option<String>,
) -> Result<Vec<HookSpec>, KernelError> {
    if state.ctx.config.hook_caller.is_none() {
        return Ok(Vec::new());
    }
    ask_policy(state, |reply| PolicyMsg::Hooks {
        point,
        input,
        rule_id,
        reply,
    })
    .await
}

/// The JSON every hook call starts from.
fn request(state: &ExecutionActorState, point: HookPoint, tool_id: &ToolId) -> Value {
    let mut request = json!({
        "point": point.as_str(),
        "execution_id": state.exec.id.as_str(),
        "agent_id": state.exec.agent_id.as_str(),
        "labels": state.exec.labels.clone().unwrap_or_default(),
        "tool_id": tool_id,
    });
    // Who created the execution, and for whom, when known.
    if let Some(created_by) = &state.exec.created_by {
        request["created_by"] = json!(created_by);
    }
    if let Some(on_behalf_of) = &state.exec.on_behalf_of {
        request["on_behalf_of"] = json!(on_behalf_of);
    }
    request
}

/// What the `pre_tool` chain did to an intent.
#[derive(Default)]
pub(super) struct PreTool {
    /// The `hook.decided` events, in call order.
    pub events: Vec<NewEvent>,
    /// Whether the intent's arguments were replaced.
    pub modified: bool,
    /// The arguments the agent proposed, when the chain replaced them.
    pub proposed: Option<Value>,
}

/// Runs the `pre_tool` chain of an allowed `invoke_tool`: modified arguments replace the
/// intent's (and are checked by the policy again: the new verdict replaces `verdict`); an
/// abort turns `verdict` into a deny that names the hook. A local tool's arguments are only
/// replaced for an agent that applies them (`capabilities.modify`); for any other agent each
/// modifying hook's `local_modify` refuses the call (a deny naming the hook) or records the
/// decision only, so the log never claims arguments the tool did not run with.
pub(super) async fn pre_tool(
    state: &ExecutionActorState,
    intent: &mut Intent,
    verdict: &mut PolicyDecision,
    capabilities: Capabilities,
) -> Result<PreTool, KernelError> {
    let Some(caller) = state.ctx.config.hook_caller.clone() else {
        return Ok(PreTool::default());
    };
    let Intent::InvokeTool {
        tool_id,
        arguments,
        remote,
        ..
    } = intent
    else {
        return Ok(PreTool::default());
    };
    if verdict.decision != Decision::Allow || !has_hooks(state, HookPoint::PreTool) {
        return Ok(PreTool::default());
    }
    let applier = if *remote || capabilities.modify {
        Applier::Applied
    } else {
        Applier::NotApplied
    };
    let input = policy_input(state, tool_id, arguments);
    let hooks = hooks_for(
        state,
        HookPoint::PreTool,
        input,
        Some(verdict.rule_id.clone()),
    )
    .await?;
    if hooks.is_empty() {
        return Ok(PreTool::default());
    }
    let mut request = request(state, HookPoint::PreTool, tool_id);
    if let Some(key) = intent_key(intent) {
        request["idempotency_key"] = json!(key);
    }
    let Intent::InvokeTool {
        tool_id, arguments, ..
    } = intent
    else {
        return Ok(PreTool::default());
    };
    let run = run_chain(
        caller.as_ref(),
        &hooks,
        HookPoint::PreTool,
        tool_id,
        request,
        "arguments",
        arguments.clone(),
        applier,
    )
    .await;
    let slot = verdict.rate_slot.take();
    let mut proposed = None;
    match run.outcome {
        ChainOutcome::Abort { hook_id, reason } => {
            *verdict = PolicyDecision::plain(Decision::Deny, &format!("hook:{hook_id}"), "");
            verdict.deny(DenialKind::Hook, reason);
        }
        ChainOutcome::Continue(new_arguments) if run.modified => {
            proposed = Some(std::mem::replace(arguments, new_arguments));
            let input = policy_input(state, tool_id, arguments);
            let recheck = ask_policy(state, |reply| PolicyMsg::Evaluate(input, reply)).await?;
            state
                .ctx
                .metrics
                .policy_decision(recheck.decision.as_str(), &recheck.rule_id);
            *verdict = recheck;
        }
        ChainOutcome::Continue(_) => {}
    }
    // Only calls that become running steps count toward a rate limit (as the windows rebuilt
    // from the store count them): a call the hooks stopped, or whose modified arguments were
    // denied or sent to approval, gives its slot back.
    match slot {
        Some(slot) if verdict.decision != Decision::Allow => release_rate_slot(state, slot),
        slot => verdict.rate_slot = slot,
    }
    Ok(PreTool {
        events: run.events,
        modified: run.modified,
        proposed,
    })
}

fn release_rate_slot(state: &ExecutionActorState, slot: RateSlot) {
    if let Some(policy) = state.ctx.policy() {
        let _ = policy.send_message(PolicyMsg::ReleaseRateSlot(slot));
    }
}

fn intent_key(intent: &Intent) -> Option<String> {
    match intent {
        Intent::InvokeTool {
            idempotency_key, ..
        } => idempotency_key.clone(),
        _ => None,
    }
}

/// What the `post_tool` chain did to a result.
#[derive(Default)]
pub(super) struct PostTool {
    /// The `hook.decided` events, in call order.
    pub events: Vec<NewEvent>,
    /// The answer to the agent that reported the result (empty for a runner).
    pub reply: StepResultReply,
}

/// Runs the `post_tool` chain of a successful result of an active step: a modified result
/// replaces the outcome's data; an abort fails the step with the hook's reason. `agent` is the
/// reporting agent's capabilities (None for a runner): an agent already holds the result it
/// reports, so a replaced result is only applied for one that applies it (the answer carries
/// it), each modifying hook's `local_modify` decides for any other agent (fail the step, or
/// record the decision and keep the agent's result), and a failed step is answered with the
/// hook and its reason so the agent does not use what it has.
pub(super) async fn post_tool(
    state: &ExecutionActorState,
    outcome: &mut StepOutcome,
    agent: Option<Capabilities>,
) -> Result<PostTool, KernelError> {
    let Some(caller) = state.ctx.config.hook_caller.clone() else {
        return Ok(PostTool::default());
    };
    if !outcome.success || !has_hooks(state, HookPoint::PostTool) {
        return Ok(PostTool::default());
    }
    let Some(step) = state
        .exec
        .step(&outcome.step_id)
        .filter(|step| !step.status.is_terminal())
    else {
        return Ok(PostTool::default());
    };
    let applier = match agent {
        Some(capabilities) if !step.remote && !capabilities.modify => Applier::NotApplied,
        _ => Applier::Applied,
    };
    let (tool_id, arguments) = (step.tool_id.clone(), step.arguments.clone());
    let input = policy_input(state, &tool_id, &arguments);
    let hooks = hooks_for(state, HookPoint::PostTool, input, None).await?;
    if hooks.is_empty() {
        return Ok(PostTool::default());
    }
    let mut request = request(state, HookPoint::PostTool, &tool_id);
    request["step_id"] = json!(outcome.step_id.as_str());
    request["arguments"] = arguments;
    let run = run_chain(
        caller.as_ref(),
        &hooks,
        HookPoint::PostTool,
        &tool_id,
        request,
        "result",
        outcome.data.clone().unwrap_or(Value::Null),
        applier,
    )
    .await;
    let mut reply = StepResultReply::default();
    match run.outcome {
        ChainOutcome::Abort { hook_id, reason } => {
            outcome.success = false;
            outcome.data = None;
            outcome.error = Some(reason.clone());
            outcome.retryable = false;
            if agent.is_some() {
                reply.failed_by_hook = Some((hook_id, reason));
            }
        }
        ChainOutcome::Continue(result) if run.modified => {
            if agent.is_some() {
                reply.result = Some(result.clone());
            }
            outcome.data = Some(result);
        }
        ChainOutcome::Continue(_) => {}
    }
    Ok(PostTool {
        events: run.events,
        reply,
    })
}
