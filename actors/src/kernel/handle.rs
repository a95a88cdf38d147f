//! The `Kernel` handle: the only way the HTTP layer (and tests) talk to the actor tree. Every
//! method forwards a message to the right actor with a timeout and maps failures into
//! [`KernelError`]. Reads of history go straight to the store.

use std::collections::BTreeMap;

use serde_json::Value;
use tokio::sync::broadcast;

use super::types::{CommitNotice, KernelError, PushStream, ToolEntry, ToolSchema};
use crate::events::Event;
use crate::execution::{Intent, IntentReply, StepOutcome};
use crate::guardrails::CreateOptions;
use crate::ids::{AgentId, ConsumerId, ExecutionId, RunnerId, SessionId, StepId, ToolId};
use crate::store::{ExecutionRow, ListFilter};

/// Cloneable handle to a running kernel.
#[derive(Clone)]
pub struct Kernel {
    pub(crate) inner: std::sync::Arc<super::KernelInner>,
}

impl Kernel {
    /// Creates an execution and tries to assign it at once; returns its projection.
    pub async fn create_execution(
        &self,
        agent_id: AgentId,
        input: Value,
        labels: Option<BTreeMap<String, String>>,
    ) -> Result<ExecutionRow, KernelError> {
        self.inner
            .create_execution(agent_id, input, labels, CreateOptions::default())
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
        self.inner
            .create_execution(agent_id, input, labels, options)
            .await
    }

    /// Returns the number of `pending` executions of `agent_id`, or kernel-wide for `None`.
    pub async fn pending_count(&self, agent_id: Option<&AgentId>) -> Result<u64, KernelError> {
        Ok(self.inner.store.pending_count(agent_id).await?)
    }

    /// Counts a creation refused because a backlog bound (`agent` or `kernel`) was reached.
    pub fn backlog_refused(&self, kind: &str) {
        self.inner
            .ctx
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
        Ok(self.inner.store.execution_by_creation_key(key).await?)
    }

    /// Returns an execution's projection (`Rejected(ExecutionNotFound)` when unknown).
    pub async fn execution(&self, id: &ExecutionId) -> Result<ExecutionRow, KernelError> {
        self.inner.execution(id).await
    }

    /// Lists executions (the caller asks `limit + 1` rows to detect a next page).
    pub async fn list_executions(
        &self,
        filter: &ListFilter,
    ) -> Result<Vec<ExecutionRow>, KernelError> {
        Ok(self.inner.store.list_executions(filter).await?)
    }

    /// Counts the executions of `filter`'s agent and labels by status.
    pub async fn count_executions(
        &self,
        filter: &ListFilter,
    ) -> Result<Vec<(crate::status::ExecutionStatus, u64)>, KernelError> {
        Ok(self.inner.store.count_executions(filter).await?)
    }

    /// Returns up to `limit` unanswered approvals, oldest first.
    pub async fn pending_approvals(
        &self,
        limit: i64,
    ) -> Result<Vec<crate::store::PendingApproval>, KernelError> {
        Ok(self.inner.store.pending_approvals(limit).await?)
    }

    /// Returns up to `limit` events with `sequence > after_sequence`.
    pub async fn events(
        &self,
        id: &ExecutionId,
        after_sequence: i64,
        limit: i64,
    ) -> Result<Vec<Event>, KernelError> {
        Ok(self.inner.store.events(id, after_sequence, limit).await?)
    }

    /// Returns one page of the kernel-wide feed (see [`crate::feed`]).
    pub async fn feed(
        &self,
        query: &crate::feed::FeedQuery,
    ) -> Result<Vec<crate::feed::FeedEvent>, KernelError> {
        Ok(self.inner.store.feed(query).await?)
    }

    /// Returns the position of the newest stored event (0 when none).
    pub async fn head_position(&self) -> Result<i64, KernelError> {
        Ok(self.inner.store.head_position().await?)
    }

    /// Returns the acknowledged position of every webhook subscription that has one.
    pub async fn webhook_positions(&self) -> Result<Vec<(String, i64)>, KernelError> {
        Ok(self.inner.store.webhook_positions().await?)
    }

    /// Records that webhook subscription `id` has delivered everything up to `position`.
    pub async fn set_webhook_position(&self, id: &str, position: i64) -> Result<(), KernelError> {
        Ok(self.inner.store.set_webhook_position(id, position).await?)
    }

    /// Cancels an execution; returns its projection afterwards.
    pub async fn cancel(&self, id: &ExecutionId) -> Result<ExecutionRow, KernelError> {
        self.inner.cancel(id).await
    }

    /// Sends a signal to an execution.
    pub async fn signal(
        &self,
        id: &ExecutionId,
        signal_type: String,
        payload: Value,
    ) -> Result<(), KernelError> {
        self.inner.signal(id, signal_type, payload).await
    }

    /// Submits an agent intent.
    pub async fn submit_intent(
        &self,
        execution_id: &ExecutionId,
        session_id: &SessionId,
        intent: Intent,
    ) -> Result<IntentReply, KernelError> {
        self.inner
            .submit_intent(execution_id, session_id, intent)
            .await
    }

    /// Records a step result reported by the agent holding the session.
    pub async fn agent_step_result(
        &self,
        execution_id: &ExecutionId,
        session_id: &SessionId,
        outcome: StepOutcome,
    ) -> Result<(), KernelError> {
        self.inner
            .agent_step_result(execution_id, session_id, outcome)
            .await
    }

    /// Records a runner's result; always frees the runner connection named by
    /// `(runner_id, consumer_id)` afterwards, whatever the outcome.
    pub async fn runner_result(
        &self,
        runner_id: &RunnerId,
        consumer_id: Option<&ConsumerId>,
        execution_id: &ExecutionId,
        outcome: StepOutcome,
    ) -> Result<(), KernelError> {
        self.inner
            .runner_result(runner_id, consumer_id, execution_id, outcome)
            .await
    }

    /// Frees a runner connection without recording anything (a result that could not be
    /// parsed still means the runner is done with its job).
    pub fn release_runner(&self, runner_id: &RunnerId, consumer_id: &ConsumerId) {
        self.inner.release_runner(runner_id, consumer_id);
    }

    /// Checks that a runner's result or `started` comes from the connection holding the job;
    /// `Ok(Err(reason))` when another connection holds it (nothing is recorded then).
    pub async fn check_job_report(
        &self,
        report: crate::runner::JobReport,
    ) -> Result<Result<(), String>, KernelError> {
        crate::runner::holders::check(&self.inner.ctx, report).await
    }

    /// Records that a runner started a step.
    pub async fn step_started(
        &self,
        execution_id: &ExecutionId,
        step_id: &StepId,
        runner_id: &RunnerId,
    ) -> Result<(), KernelError> {
        self.inner
            .step_started(execution_id, step_id, runner_id)
            .await
    }

    /// Registers an agent connection; its pushes arrive on the returned stream.
    pub async fn connect_agent(
        &self,
        agent_id: AgentId,
        consumer_id: ConsumerId,
    ) -> Result<PushStream, KernelError> {
        self.inner.connect_agent(agent_id, consumer_id).await
    }

    /// Registers a runner connection offering `capabilities` (tool ids).
    pub async fn connect_runner(
        &self,
        runner_id: RunnerId,
        consumer_id: ConsumerId,
        capabilities: Vec<ToolId>,
    ) -> Result<PushStream, KernelError> {
        self.inner
            .connect_runner(runner_id, consumer_id, capabilities)
            .await
    }

    /// Replaces the tool schemas published by a runner.
    pub async fn publish_tools(
        &self,
        runner_id: &RunnerId,
        tools: Vec<ToolSchema>,
    ) -> Result<(), KernelError> {
        self.inner.publish_tools(runner_id, tools).await
    }

    /// Returns the tool directory filtered by prefix (WIRE.md §13.7 plus `prefix.`).
    pub fn tools(&self, prefix: &str) -> Vec<ToolEntry> {
        self.inner.tools.list(prefix)
    }

    /// Replaces the capabilities of every connection of a runner.
    pub async fn update_capabilities(
        &self,
        runner_id: &RunnerId,
        tools: Vec<ToolId>,
    ) -> Result<(), KernelError> {
        self.inner.update_capabilities(runner_id, tools).await
    }

    /// Drops a runner's published schemas.
    pub async fn unregister_runner(&self, runner_id: &RunnerId) -> Result<(), KernelError> {
        self.inner.unregister_runner(runner_id).await
    }

    /// Replaces the policy engine and its hooks (hot reload). Rate-limit windows are kept. A
    /// restarted policy actor also uses the new engine; creations from now on use the new
    /// `pre_create` hooks.
    pub fn replace_policy(
        &self,
        engine: std::sync::Arc<dyn crate::policy::PolicyEngine>,
        hooks: Vec<crate::hooks::HookSpec>,
    ) {
        self.inner.replace_policy(engine, hooks);
    }

    /// Subscribes to commit notices (used by the live execution stream).
    pub fn subscribe_commits(&self) -> broadcast::Receiver<CommitNotice> {
        self.inner.commits.subscribe()
    }

    /// Round-trips to the store.
    pub async fn ready(&self) -> Result<(), KernelError> {
        Ok(self.inner.store.ping().await?)
    }

    /// Returns the metrics in Prometheus text format.
    pub fn encode_metrics(&self) -> String {
        self.inner.metrics.encode()
    }

    /// Reads the queue depths from the store into their gauges (before a scrape). On a store
    /// error the gauges keep their last values and the error is logged.
    pub async fn refresh_queue_metrics(&self) {
        match self.inner.store.queue_depths().await {
            Ok(depths) => self
                .inner
                .metrics
                .operator
                .set_queue_depths(&depths, crate::time::now()),
            Err(error) => tracing::warn!(error = %error, "cannot read queue depths for /metrics"),
        }
    }

    /// Returns the metrics, for adapters that count their own things (SSE connections).
    pub fn metrics(&self) -> &crate::metrics::Metrics {
        &self.inner.metrics
    }

    /// Stops the actor tree (top-down, bounded by the shutdown deadline). Idempotent.
    pub async fn shutdown(&self) {
        self.inner.shutdown().await;
    }
}
