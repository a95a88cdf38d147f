//! The storage port as the SQLite store answers it: commits go to the writer thread, reads to
//! the pool of read-only connections (through the query modules beside this one).

use std::sync::Arc;

use async_trait::async_trait;

use keel_actors::error::StoreError;
use keel_actors::events::Event;
use keel_actors::feed::{FeedEvent, FeedQuery};
use keel_actors::ids::{AgentId, ExecutionId, ToolId};
use keel_actors::metrics::Metrics;
use keel_actors::status::ExecutionStatus;
use keel_actors::store::{
    AllowedToolCall, Batch, Commit, ExecutionRow, ListFilter, PendingApproval, PendingEntry,
    QueueDepths, RecoveryEntry, RunnerToolResult, RunningEntry, Store,
};
use keel_actors::time::{self, Timestamp};

use super::super::rows::{EVENT_COLUMNS, EXECUTION_COLUMNS, EventRecord, ExecutionRecord};
use super::super::{SQLITE_NON_TERMINAL, map_sqlx_error};
use super::{SQLITE_RECOVERY_INDEX, SqliteStore, list, probe};

#[async_trait]
impl Store for SqliteStore {
    async fn commit(&self, batch: &[Commit]) -> Result<(), StoreError> {
        if batch.is_empty() {
            return Ok(());
        }
        // All or nothing: every result is the same; the first says it.
        let results = self.writer.commit(batch.to_vec(), true).await;
        results.into_iter().next().unwrap_or(Ok(()))
    }

    async fn commit_group(&self, group: Vec<Commit>) -> Vec<Result<(), StoreError>> {
        if group.is_empty() {
            return Vec::new();
        }
        self.writer.commit(group, false).await
    }

    /// Groups wait in the writer thread's channel and the ones waiting are folded into its
    /// next transaction.
    fn folds_groups(&self) -> bool {
        true
    }

    fn observe_transactions(&self, metrics: Arc<Metrics>) {
        self.writer.observe(metrics);
    }

    async fn events(
        &self,
        id: &ExecutionId,
        after_sequence: i64,
        limit: i64,
    ) -> Result<Vec<Event>, StoreError> {
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM events \
             WHERE execution_id = ? AND sequence > ? ORDER BY sequence LIMIT ?"
        );
        let records = sqlx::query_as::<_, EventRecord>(&sql)
            .bind(id.as_str())
            .bind(after_sequence)
            .bind(limit.max(0))
            .fetch_all(&self.readers)
            .await
            .map_err(map_sqlx_error)?;
        records.into_iter().map(EventRecord::into_event).collect()
    }

    async fn events_within(
        &self,
        id: &ExecutionId,
        after_sequence: i64,
        limit: i64,
        max_bytes: i64,
    ) -> Result<Batch<Event>, StoreError> {
        let mut builder = super::super::bounded::events_query::<sqlx::Sqlite>(
            EVENT_COLUMNS,
            super::super::bounded::PayloadSize::Sqlite,
            id,
            after_sequence,
            limit,
            max_bytes,
        );
        let rows = builder
            .build_query_as::<super::super::bounded::SizedEvent>()
            .fetch_all(&self.readers)
            .await
            .map_err(map_sqlx_error)?;
        super::super::bounded::events_batch(rows, limit, max_bytes)
    }

    async fn execution(&self, id: &ExecutionId) -> Result<Option<ExecutionRow>, StoreError> {
        let sql = format!("SELECT {EXECUTION_COLUMNS} FROM executions WHERE id = ?");
        let record = sqlx::query_as::<_, ExecutionRecord>(&sql)
            .bind(id.as_str())
            .fetch_optional(&self.readers)
            .await
            .map_err(map_sqlx_error)?;
        record.map(ExecutionRecord::into_row).transpose()
    }

    async fn list_executions(&self, filter: &ListFilter) -> Result<Vec<ExecutionRow>, StoreError> {
        list::list_executions(&self.readers, filter).await
    }

    async fn non_terminal_executions(&self) -> Result<Vec<ExecutionId>, StoreError> {
        let sql = format!(
            "SELECT id FROM executions {SQLITE_RECOVERY_INDEX} WHERE {SQLITE_NON_TERMINAL} \
             ORDER BY created_at, id"
        );
        let ids = sqlx::query_scalar::<_, String>(&sql)
            .fetch_all(&self.readers)
            .await
            .map_err(map_sqlx_error)?;
        Ok(ids.into_iter().map(ExecutionId::new).collect())
    }

    async fn recovery_index(&self) -> Result<Vec<RecoveryEntry>, StoreError> {
        let sql = super::super::recovery::query(
            "e.created_at",
            SQLITE_NON_TERMINAL,
            SQLITE_RECOVERY_INDEX,
        );
        let records = sqlx::query_as::<_, super::super::recovery::RecoveryRecord>(&sql)
            .fetch_all(&self.readers)
            .await
            .map_err(map_sqlx_error)?;
        records
            .into_iter()
            .map(|record| record.into_entry())
            .collect()
    }

    async fn delete_terminal_before(
        &self,
        before: Timestamp,
        limit: i64,
    ) -> Result<u64, StoreError> {
        self.writer
            .delete_terminal_before(time::format(&before), limit)
            .await
    }

    async fn tool_calls_since(&self, since: Timestamp) -> Result<Vec<AllowedToolCall>, StoreError> {
        super::super::tool_calls::sqlite(&self.readers, since).await
    }

    async fn tool_results_since(
        &self,
        since: Timestamp,
    ) -> Result<Vec<keel_actors::store::ToolResult>, StoreError> {
        super::super::tool_results::sqlite(&self.readers, since).await
    }

    async fn runner_results_since(
        &self,
        since: Timestamp,
    ) -> Result<Vec<RunnerToolResult>, StoreError> {
        super::super::tool_results::sqlite_runners(&self.readers, since).await
    }

    async fn execution_by_creation_key(
        &self,
        key: &str,
    ) -> Result<Option<ExecutionId>, StoreError> {
        super::super::creation::sqlite_by_key(&self.readers, key).await
    }

    async fn pending_count(&self, agent_id: Option<&AgentId>) -> Result<u64, StoreError> {
        let agent_id = agent_id.map(AgentId::as_str);
        super::super::creation::sqlite_count(&self.readers, agent_id).await
    }

    async fn pending_queue(&self, agent_id: &AgentId) -> Result<Vec<PendingEntry>, StoreError> {
        let agent_id = agent_id.as_str();
        super::super::creation::sqlite_pending(&self.readers, agent_id).await
    }

    async fn active_local_steps(&self, tool_id: &ToolId) -> Result<u64, StoreError> {
        let tool_id = tool_id.as_str();
        super::super::creation::sqlite_local_steps(&self.readers, tool_id).await
    }

    async fn running_executions(
        &self,
        agent_id: &AgentId,
    ) -> Result<Vec<RunningEntry>, StoreError> {
        let agent_id = agent_id.as_str();
        super::super::creation::sqlite_running(&self.readers, agent_id).await
    }

    async fn queue_depths(&self) -> Result<QueueDepths, StoreError> {
        super::super::depths::sqlite(&self.readers).await
    }

    async fn feed(&self, query: &FeedQuery) -> Result<Batch<FeedEvent>, StoreError> {
        super::super::feed::sqlite_feed(&self.readers, EVENT_COLUMNS, query).await
    }

    async fn head_position(&self) -> Result<i64, StoreError> {
        super::super::feed::sqlite_head(&self.readers).await
    }

    async fn webhook_positions(&self) -> Result<Vec<(String, i64)>, StoreError> {
        super::super::feed::sqlite_webhook_positions(&self.readers).await
    }

    async fn set_webhook_position(&self, id: &str, position: i64) -> Result<(), StoreError> {
        self.writer
            .set_webhook_position(id.to_owned(), position)
            .await
    }

    async fn api_keys(&self) -> Result<Vec<keel_actors::store::StoredKey>, StoreError> {
        super::super::keys::sqlite_keys(&self.readers).await
    }

    async fn put_api_keys(&self, keys: &[keel_actors::store::StoredKey]) -> Result<(), StoreError> {
        self.writer.put_api_keys(keys.to_vec()).await
    }

    async fn count_executions(
        &self,
        filter: &ListFilter,
    ) -> Result<Vec<(ExecutionStatus, u64)>, StoreError> {
        super::super::overview::sqlite_counts(&self.readers, filter).await
    }

    async fn pending_approvals(&self, limit: i64) -> Result<Vec<PendingApproval>, StoreError> {
        super::super::overview::sqlite_approvals(&self.readers, limit).await
    }

    async fn close(&self) {
        SqliteStore::close(self).await;
    }

    /// Ready when a write could start now: another process holding the write lock makes the
    /// kernel unready within `probe::PROBE_BUSY_TIMEOUT`.
    async fn ping(&self) -> Result<(), StoreError> {
        probe::writable(&self.probe).await
    }
}
