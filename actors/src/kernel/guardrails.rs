//! Kernel methods of the guardrails (docs/guardrails.md): a new policy reaching the actors that
//! enforce it, the budget view of an execution, the circuit breakers.

use std::sync::Arc;

use serde_json::{Value, json};

use super::context::call;
use super::handle::Kernel;
use super::types::KernelError;
use crate::guardrails::budget::BudgetUsage;
use crate::policy::PolicyMsg;
use crate::runner::DispatcherMsg;
use crate::store::ExecutionRow;

/// Events read per page when an execution's usage is folded.
const USAGE_PAGE: i64 = 1000;

impl Kernel {
    /// Returns the circuit breakers that are open, half-open or counting recent failures:
    /// those of tool ids (the policy actor's), then those of runner ids (the dispatcher's).
    pub async fn breakers(&self) -> Result<Vec<Value>, KernelError> {
        let ctx = &self.ctx;
        let policy = ctx
            .policy()
            .ok_or_else(|| KernelError::Unavailable("policy actor is not running".into()))?;
        let dispatcher = ctx
            .dispatcher()
            .ok_or_else(|| KernelError::Unavailable("dispatcher is not running".into()))?;
        let timeout = ctx.config.call_timeout;
        let mut breakers = call(&policy, PolicyMsg::Breakers, timeout, "policy actor").await?;
        let runners = call(&dispatcher, DispatcherMsg::Breakers, timeout, "dispatcher").await?;
        breakers.extend(runners);
        Ok(breakers)
    }

    /// Returns the budget view of an execution (`{"limits", "used", "remaining"}`) when the
    /// policy in force gives its agent a budget, else `None`. Usage is folded from the
    /// execution's events, the same way the execution counts it.
    pub async fn execution_budget(&self, row: &ExecutionRow) -> Result<Option<Value>, KernelError> {
        let ctx = &self.ctx;
        let Some(policy) = ctx.policy() else {
            return Ok(None);
        };
        let agent_id = row.agent_id.clone();
        let budget = call(
            &policy,
            |reply| PolicyMsg::AgentBudget(agent_id.clone(), reply),
            ctx.config.call_timeout,
            "policy actor",
        )
        .await?;
        let Some(budget) = budget else {
            return Ok(None);
        };
        let mut usage = BudgetUsage::default();
        let mut after = 0;
        loop {
            let events = ctx.store.events(&row.id, after, USAGE_PAGE).await?;
            for event in &events {
                usage.apply(&event.body);
            }
            match events.last() {
                Some(last) if events.len() as i64 == USAGE_PAGE => after = last.sequence,
                _ => break,
            }
        }
        let end = if row.status.is_terminal() {
            row.updated_at
        } else {
            ctx.now()
        };
        let elapsed = (end - row.created_at).to_std().unwrap_or_default();
        Ok(Some(json!({
            "limits": budget.limits_json(),
            "used": usage.json(elapsed),
            "remaining": budget.remaining_json(&usage, elapsed),
        })))
    }

    /// Returns the policy engine in force (for a read-only look, such as which tools an
    /// execution may see; calls are decided by the policy actor).
    pub fn policy_engine(&self) -> std::sync::Arc<dyn crate::policy::PolicyEngine> {
        super::context::read(&self.ctx.policy_in_force)
            .engine
            .clone()
    }

    /// Replaces the policy engine and its hooks (hot reload). Rate-limit windows are kept. A
    /// restarted policy actor also uses the new engine; creations from now on use the new
    /// `pre_create` hooks. The policy actor swaps it, and the owners of concurrency limits
    /// (agent groups, the dispatcher) read their limits from it again.
    pub fn replace_policy(
        &self,
        engine: Arc<dyn crate::policy::PolicyEngine>,
        hooks: Vec<crate::hooks::HookSpec>,
    ) {
        let in_force = crate::policy::InForce {
            engine,
            hooks: hooks.into(),
        };
        *super::context::write(&self.ctx.policy_in_force) = in_force.clone();
        if let Some(policy) = self.ctx.policy() {
            let _ = policy.send_message(crate::policy::PolicyMsg::ReplacePolicy(in_force));
        }
        // Concurrency limits are read by their owners when told.
        for group in self.ctx.agent_groups.actors() {
            let _ = group.send_message(crate::agent_group::AgentGroupMsg::PolicyReplaced);
        }
        self.ctx.tell_dispatcher(DispatcherMsg::PolicyReplaced);
    }

    /// Tells the dispatcher's runner breakers about a result a runner reported (`None`: the
    /// execution did not take it, so it counts for nothing).
    pub(super) fn count_runner_result(
        &self,
        runner_id: &crate::ids::RunnerId,
        success: Option<bool>,
    ) {
        if let Some(success) = success
            && !runner_id.as_str().is_empty()
        {
            self.ctx.tell_dispatcher(DispatcherMsg::RunnerResult {
                runner_id: runner_id.clone(),
                success,
            });
        }
    }
}
