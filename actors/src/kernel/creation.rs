//! Creating an execution: the `pre_create` hooks of its agent (docs/hooks.md), the commit of
//! `execution.created` (with the hooks' `hook.decided` after it, in the same transaction), the
//! execution actor, and the first assignment attempt.
//!
//! The hooks run here, in the creating request's task, before anything is written: no
//! execution exists yet, so there is no single writer to hold, and a slow hook delays only its
//! own request (each call is bounded by the hook's timeout). They are read from the policy in
//! force (`Ctx::policy_in_force`, replaced with the policy on reload) without a round trip to the
//! policy actor, so a creation without hooks costs nothing more than before.

use std::collections::BTreeMap;

use serde_json::Value;

use super::context::{call, read};
use super::handle::Kernel;
use super::settle;
use super::types::KernelError;
use crate::agent_group::AgentGroupMsg;
use crate::events::NewEvent;
use crate::execution::actor::record_creation_decided;
use crate::execution::{ExecutionMsg, ExecutionSupervisorMsg};
use crate::guardrails::CreateOptions;
use crate::hooks::HookSpec;
use crate::hooks::creation::{CreationOutcome, CreationRequest, run_creation_chain};
use crate::ids::{AgentId, ExecutionId};
use crate::store::ExecutionRow;

impl Kernel {
    /// Creates an execution and tries to assign it at once; returns its projection.
    pub async fn create_execution(
        &self,
        agent_id: AgentId,
        input: Value,
        labels: Option<BTreeMap<String, String>>,
    ) -> Result<ExecutionRow, KernelError> {
        self.create_execution_with(agent_id, input, labels, CreateOptions::default())
            .await
    }

    /// Creates an execution with a queue priority and/or an idempotency key (a repeated key
    /// fails with a store `Conflict`: look the first one up with
    /// [`Kernel::execution_by_creation_key`]).
    pub async fn create_execution_with(
        &self,
        agent_id: AgentId,
        input: Value,
        labels: Option<BTreeMap<String, String>>,
        options: CreateOptions,
    ) -> Result<ExecutionRow, KernelError> {
        let (labels, decisions) = self.pre_create(&agent_id, &input, labels, &options).await?;
        let id = options.id.clone().unwrap_or_else(ExecutionId::generate);
        let priority = options.priority;
        let created = match record_creation_decided(
            &self.ctx,
            &id,
            &agent_id,
            input,
            labels.as_ref(),
            options,
            decisions,
        )
        .await
        {
            Ok(created) => created,
            Err(error) => {
                // The commit may have landed anyway: make sure a stored execution reaches its agent.
                if settle::in_doubt(&error)
                    && let Some(executions) = self.ctx.execution_supervisor()
                {
                    tokio::spawn(settle::settle_creation(
                        self.ctx.store.clone(),
                        executions,
                        self.timeout(),
                        id,
                    ));
                }
                return Err(error);
            }
        };
        self.ctx
            .ask_execution_supervisor(|reply| ExecutionSupervisorMsg::Create {
                state: Box::new(created),
                reply,
            })
            .await??;
        let group = self.group(&agent_id).await?;
        let labels = labels.map(crate::guardrails::concurrency::LabelSet::from);
        let pending = |reply| AgentGroupMsg::ExecutionPending {
            execution_id: id.clone(),
            priority,
            labels,
            reply: Some(reply),
        };
        call(&group, pending, self.timeout(), "agent group").await?;
        // The projection after the first assignment attempt: `running` when a connected
        // consumer took it at once.
        self.ctx
            .ask_execution(&id, |reply| ExecutionMsg::GetExecution { reply })
            .await
    }

    /// Runs the agent's `pre_create` hooks: returns the labels to create with and the
    /// `hook.decided` events to commit, or [`KernelError::HookRefused`].
    async fn pre_create(
        &self,
        agent_id: &AgentId,
        input: &Value,
        labels: Option<BTreeMap<String, String>>,
        options: &CreateOptions,
    ) -> Result<(Option<BTreeMap<String, String>>, Vec<NewEvent>), KernelError> {
        let Some(caller) = self.ctx.config.hook_caller.clone() else {
            return Ok((labels, Vec::new()));
        };
        let hooks: Vec<HookSpec> = read(&self.ctx.policy_in_force)
            .hooks
            .iter()
            .filter(|hook| hook.applies_to_creation(agent_id))
            .cloned()
            .collect();
        if hooks.is_empty() {
            return Ok((labels, Vec::new()));
        }
        let creation = CreationRequest {
            agent_id: agent_id.as_str(),
            input,
            labels: labels.as_ref(),
            priority: options.priority,
            idempotency_key: options.idempotency_key.as_deref(),
            created_by: options.created_by.as_deref(),
            on_behalf_of: options.on_behalf_of.as_deref(),
        };
        let run = run_creation_chain(caller.as_ref(), &hooks, creation).await;
        match run.outcome {
            CreationOutcome::Create(labels) => Ok((labels, run.events)),
            CreationOutcome::Refuse { hook_id, reason } => {
                tracing::info!(agent.id = %agent_id, hook.id = %hook_id, reason = %reason, "creation refused by a pre_create hook");
                Err(KernelError::HookRefused { hook_id, reason })
            }
        }
    }
}
