//! The `Kernel` handle: the only way the HTTP layer (and tests) talk to the actor tree. It is
//! one `Arc` of the shared context ([`Ctx`]); its methods send a message to the right actor
//! with a timeout and map failures into [`KernelError`]. They are split by concern: this file
//! holds the reads that go straight to the store and the metrics; `calls.rs` the calls into
//! executions, `connections.rs` the agents' and runners' side, `creation.rs`, `guardrails.rs`,
//! `recovery.rs`, and `lifecycle.rs` (start and shutdown).

use std::sync::Arc;

use tokio::sync::broadcast;

use super::context::Ctx;
use super::types::{CommitNotice, KernelError};
use crate::events::Event;
use crate::ids::{AgentId, ExecutionId};
use crate::store::{ExecutionRow, ListFilter};

/// Cloneable handle to a running kernel.
#[derive(Clone)]
pub struct Kernel {
    pub(crate) ctx: Arc<Ctx>,
}

impl Kernel {
    /// The store the kernel writes to (for adapters that keep their own rows in it, such as
    /// the HTTP layer's API keys).
    pub fn store(&self) -> &Arc<dyn crate::store::Store> {
        &self.ctx.store
    }

    /// Returns the number of `pending` executions of `agent_id`, or kernel-wide for `None`.
    pub async fn pending_count(&self, agent_id: Option<&AgentId>) -> Result<u64, KernelError> {
        Ok(self.ctx.store.pending_count(agent_id).await?)
    }

    /// Counts a creation refused because a backlog bound (`agent` or `kernel`) was reached.
    pub fn backlog_refused(&self, kind: &str) {
        self.ctx
            .metrics
            .backlog_refused
            .get_or_create(&crate::metrics::KindLabel {
                kind: kind.to_owned(),
            })
            .inc();
    }

    /// Returns the execution created with `Idempotency-Key` `key`, if any.
    pub async fn execution_by_creation_key(
        &self,
        key: &str,
    ) -> Result<Option<ExecutionId>, KernelError> {
        Ok(self.ctx.store.execution_by_creation_key(key).await?)
    }

    /// Lists executions (the caller asks `limit + 1` rows to detect a next page).
    pub async fn list_executions(
        &self,
        filter: &ListFilter,
    ) -> Result<Vec<ExecutionRow>, KernelError> {
        Ok(self.ctx.store.list_executions(filter).await?)
    }

    /// Whether anything already knows `agent_id`: a policy file of its own (directory mode) or
    /// an execution in the store (`--strict-agents`; the caller also asks its consumers).
    pub async fn knows_agent(&self, agent_id: &crate::ids::AgentId) -> Result<bool, KernelError> {
        let named = super::context::read(&self.ctx.policy_in_force)
            .engine
            .names_agent(agent_id);
        if named {
            return Ok(true);
        }
        let filter = ListFilter {
            agent_id: Some(agent_id.clone()),
            limit: 1,
            ..ListFilter::default()
        };
        Ok(!self.ctx.store.list_executions(&filter).await?.is_empty())
    }

    /// Counts the executions of `filter`'s agent and labels by status.
    pub async fn count_executions(
        &self,
        filter: &ListFilter,
    ) -> Result<Vec<(crate::status::ExecutionStatus, u64)>, KernelError> {
        Ok(self.ctx.store.count_executions(filter).await?)
    }

    /// Returns up to `limit` unanswered approvals, oldest first.
    pub async fn pending_approvals(
        &self,
        limit: i64,
    ) -> Result<Vec<crate::store::PendingApproval>, KernelError> {
        Ok(self.ctx.store.pending_approvals(limit).await?)
    }

    /// Returns up to `limit` events with `sequence > after_sequence`.
    pub async fn events(
        &self,
        id: &ExecutionId,
        after_sequence: i64,
        limit: i64,
    ) -> Result<Vec<Event>, KernelError> {
        Ok(self.ctx.store.events(id, after_sequence, limit).await?)
    }

    /// Returns up to `limit` events with `sequence > after_sequence`, and only as many as
    /// pass `max_bytes` by at most one (see [`crate::store::Batch`]).
    pub async fn events_within(
        &self,
        id: &ExecutionId,
        after_sequence: i64,
        limit: i64,
        max_bytes: i64,
    ) -> Result<crate::store::Batch<Event>, KernelError> {
        Ok(self
            .ctx
            .store
            .events_within(id, after_sequence, limit, max_bytes)
            .await?)
    }

    /// Returns one page of the kernel-wide feed (see [`crate::feed`]).
    pub async fn feed(
        &self,
        query: &crate::feed::FeedQuery,
    ) -> Result<crate::store::Batch<crate::feed::FeedEvent>, KernelError> {
        Ok(self.ctx.store.feed(query).await?)
    }

    /// Returns the position of the newest stored event (0 when none).
    pub async fn head_position(&self) -> Result<i64, KernelError> {
        Ok(self.ctx.store.head_position().await?)
    }

    /// Returns the acknowledged position of every webhook subscription that has one.
    pub async fn webhook_positions(&self) -> Result<Vec<(String, i64)>, KernelError> {
        Ok(self.ctx.store.webhook_positions().await?)
    }

    /// Records that webhook subscription `id` has delivered everything up to `position`.
    pub async fn set_webhook_position(&self, id: &str, position: i64) -> Result<(), KernelError> {
        Ok(self.ctx.store.set_webhook_position(id, position).await?)
    }

    /// Subscribes to commit notices (used by the live execution stream).
    pub fn subscribe_commits(&self) -> broadcast::Receiver<CommitNotice> {
        self.ctx.commits.subscribe()
    }

    /// Round-trips to the store.
    pub async fn ready(&self) -> Result<(), KernelError> {
        Ok(self.ctx.store.ping().await?)
    }

    /// Returns the metrics in Prometheus text format.
    pub fn encode_metrics(&self) -> String {
        self.ctx.metrics.encode()
    }

    /// Returns the pending executions per agent and the queued remote jobs per tool.
    pub async fn queue_depths(&self) -> Result<crate::store::QueueDepths, KernelError> {
        Ok(self.ctx.store.queue_depths().await?)
    }

    /// Reads the queue depths from the store into their gauges (before a scrape). On a store
    /// error the gauges keep their last values and the error is logged.
    pub async fn refresh_queue_metrics(&self) {
        match self.ctx.store.queue_depths().await {
            Ok(depths) => self
                .ctx
                .metrics
                .operator
                .set_queue_depths(&depths, crate::time::now()),
            Err(error) => tracing::warn!(error = %error, "cannot read queue depths for /metrics"),
        }
    }

    /// Returns the metrics, for adapters that count their own things (SSE connections).
    pub fn metrics(&self) -> &crate::metrics::Metrics {
        &self.ctx.metrics
    }

    /// Returns the call timeout of the actors.
    pub(super) fn timeout(&self) -> std::time::Duration {
        self.ctx.config.call_timeout
    }
}
