//! Startup recovery: rebuilds the world from one index query of the store.

use std::collections::HashMap;

use ractor::ActorRef;

use super::handle::Kernel;
use super::types::KernelError;
use crate::agent_group::AgentGroupMsg;
use crate::execution::{ExecutionMsg, ExecutionSupervisorMsg};
use crate::ids::ExecutionId;
use crate::status::ExecutionStatus;
use crate::time::Timestamp;

/// Most pending approvals whose expiry a recovery reads.
const MAX_RECOVERED_APPROVALS: i64 = 100_000;

impl Kernel {
    /// Startup recovery from an index scan: executions with work in flight (a session that
    /// runs, tool steps) get their actor back and re-announce themselves; those that only wait
    /// stay in the store — a pending one is found by its agent group when a consumer connects,
    /// a blocked one keeps its session binding — and only their deadline is indexed.
    pub(super) async fn recover(&self) -> Result<(), KernelError> {
        let started = std::time::Instant::now();
        let entries = self.ctx.store.recovery_index().await?;
        let (count, active, waiting) = self.recover_entries(entries).await?;
        tracing::info!(
            executions = count,
            rebuilt = active,
            waiting,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "startup recovery done"
        );
        Ok(())
    }

    /// Cluster mode: loads the open executions of `partitions`, just acquired, the way startup
    /// recovery loads every one (work in flight gets its actor, waiting executions their
    /// deadline), so their timers run without a request. Returns how many were found.
    pub async fn recover_partitions(&self, partitions: &[u32]) -> Result<usize, KernelError> {
        if partitions.is_empty() {
            return Ok(0);
        }
        let entries = self.ctx.store.recovery_index_of(partitions).await?;
        // Their agent groups offer the pending ones to the consumers connected now.
        let mut waiting_agents: Vec<crate::ids::AgentId> = entries
            .iter()
            .filter(|entry| entry.status == ExecutionStatus::Pending)
            .map(|entry| entry.agent_id.clone())
            .collect();
        waiting_agents.sort();
        waiting_agents.dedup();
        let (count, _, _) = self.recover_entries(entries).await?;
        for agent_id in &waiting_agents {
            self.ctx
                .tell_agent_group(agent_id, AgentGroupMsg::ReloadPending);
        }
        Ok(count)
    }

    /// Cluster mode: stops the resident actors of the executions `matches` selects (their
    /// partition moved to another kernel) without writing anything, forgets their wake-ups
    /// and session bindings; an activation waiting for one of them is answered unavailable.
    /// Returns how many actors were stopped.
    pub async fn release_executions(
        &self,
        matches: crate::execution::ReleaseFilter,
    ) -> Result<usize, KernelError> {
        super::context::write(&self.ctx.sessions).retain(|_, execution| !matches(execution));
        let released = matches.clone();
        let stopped = self
            .ctx
            .ask_execution_supervisor(|reply| ExecutionSupervisorMsg::Release { matches, reply })
            .await?;
        // After the actors stopped: none of them moves a gauge any more.
        self.ctx.metrics.executions_released(&*released);
        stopped
    }

    /// Gives each entry of a recovery index its actor or its wake-up; returns the number of
    /// entries, those rebuilt and those left waiting.
    async fn recover_entries(
        &self,
        entries: Vec<crate::store::RecoveryEntry>,
    ) -> Result<(usize, usize, usize), KernelError> {
        let count = entries.len();
        let timeout = self.ctx.config.execution.execution_timeout;
        let mut dormant = Vec::new();
        let mut active = 0usize;
        let blocked = entries
            .iter()
            .any(|entry| entry.status == ExecutionStatus::Blocked && !entry.live_steps);
        let expiries = if blocked && self.ctx.config.passivate_after.is_some() {
            self.approval_expiries().await?
        } else {
            HashMap::new()
        };
        for entry in entries {
            self.ctx
                .metrics
                .execution_moved(&entry.id, None, entry.status);
            let waits = match entry.status {
                ExecutionStatus::Pending => true,
                ExecutionStatus::Blocked => !entry.live_steps,
                _ => false,
            };
            if !waits || self.ctx.config.passivate_after.is_none() {
                active += 1;
                if let Err(error) = self.activate(&entry.id).await {
                    tracing::error!(execution.id = %entry.id, error = %error, "execution could not be recovered");
                }
                continue;
            }
            if let (Some(session_id), Some(consumer_id)) = (&entry.session_id, &entry.consumer_id)
                && entry.status != ExecutionStatus::Pending
            {
                super::context::write(&self.ctx.sessions)
                    .insert(session_id.clone(), entry.id.clone());
                self.ctx.tell_agent_group(
                    &entry.agent_id,
                    AgentGroupMsg::SessionRestored {
                        consumer_id: consumer_id.clone(),
                        execution_id: entry.id.clone(),
                        // The group read them from the store when it started.
                        labels: None,
                    },
                );
            }
            let mut wake_at = crate::time::add(entry.created_at, timeout);
            if let Some(expiry) = expiries.get(&entry.id) {
                // An approval that expired while the kernel was down is denied at once.
                wake_at = wake_at.min(*expiry);
            }
            dormant.push((entry.id, Some(wake_at)));
        }
        let waiting = dormant.len();
        if !dormant.is_empty() {
            self.ctx
                .running_execution_supervisor()?
                .send_message(ExecutionSupervisorMsg::Dormant(dormant))
                .map_err(|_| {
                    KernelError::Unavailable("execution supervisor is not running".into())
                })?;
        }
        Ok((count, active, waiting))
    }

    /// When each waiting approval with an expiry expires, by execution (read once per recovery,
    /// so that a passivated execution is woken for its approval's expiry).
    async fn approval_expiries(&self) -> Result<HashMap<ExecutionId, Timestamp>, KernelError> {
        let pending = self
            .ctx
            .store
            .pending_approvals(MAX_RECOVERED_APPROVALS)
            .await?;
        Ok(pending
            .into_iter()
            .filter_map(|approval| {
                let text = approval.request.get("expires_at")?.as_str()?;
                let expiry = chrono::DateTime::parse_from_rfc3339(text).ok()?;
                Some((approval.execution_id, expiry.with_timezone(&chrono::Utc)))
            })
            .collect())
    }

    /// Activates an execution and has it re-announce itself (startup recovery).
    async fn activate(&self, id: &ExecutionId) -> Result<ActorRef<ExecutionMsg>, KernelError> {
        self.ctx.activate_with(id, true).await
    }
}
