//! The verdict on one `invoke_tool`: the rule and the budget, decided here unless a breaker or a
//! rate limit needs the policy actor's state (`policy::check`), then `concurrency.tools` for local calls (docs/guardrails.md, "Concurrency limits"):
//! a tool the agent runs itself cannot wait in the dispatcher's queue, so a local call of a tool
//! at its `max_concurrent_steps` is denied. The unfinished local steps of the tool are counted
//! in the store (`Store::active_local_steps`, a partial index), only for tools with a limit.

use serde_json::Value;

use super::actor::ExecutionActorState;
use crate::ids::ToolId;
use crate::kernel::KernelError;
use crate::kernel::context::read;
use crate::policy::check::{Checked, check_without_actor};
use crate::policy::{Decision, DenialKind, PolicyDecision, PolicyMsg};

/// Asks the policy actor about a call, then applies the local-call limit.
pub(super) async fn check_policy(
    state: &ExecutionActorState,
    tool_id: &ToolId,
    arguments: &Value,
    remote: bool,
) -> Result<PolicyDecision, KernelError> {
    let input = super::hooks::policy_input(state, tool_id, arguments);
    let engine = read(&state.ctx.policy_in_force).engine.clone();
    let started = std::time::Instant::now();
    let mut verdict = match check_without_actor(&*engine, &input, &state.ctx.metrics) {
        Checked::Decided(verdict) => verdict,
        Checked::NeedsActor(decision) => {
            let admit = |reply| PolicyMsg::Admit {
                input,
                decision: Box::new(decision),
                started,
                reply,
            };
            super::hooks::ask_policy(state, admit).await?
        }
    };
    limit_local_call(state, tool_id, remote, &mut verdict).await?;
    Ok(verdict)
}

/// Turns an allow of a local call into a denial when `tool_id` is at its limit.
async fn limit_local_call(
    state: &ExecutionActorState,
    tool_id: &ToolId,
    remote: bool,
    verdict: &mut PolicyDecision,
) -> Result<(), KernelError> {
    let Some(limit) = verdict.max_concurrent_steps else {
        return Ok(());
    };
    if remote || verdict.decision != Decision::Allow {
        return Ok(());
    }
    let running = state.ctx.store.active_local_steps(tool_id).await?;
    if running >= u64::from(limit) {
        let reason = format!(
            "concurrency limit: max_concurrent_steps {limit} reached for tool {tool_id} \
             ({running} local steps running)"
        );
        verdict.deny(DenialKind::ConcurrencyLimit, reason);
        state.ctx.metrics.guardrails.concurrency_denied("tool");
    }
    Ok(())
}
