//! SQLite implementation of the storage port: one file in WAL mode with `synchronous=FULL`,
//! one writer connection on a thread of its own (`writer.rs`, the only connection that ever
//! writes: commits and retention) and a sqlx pool of read-only connections for everything
//! else. Built by [`super::open`] for `sqlite:` URLs. Migrations run at open on a sqlx
//! connection that is closed once the writer thread holds the file.
//!
//! One kernel per file: the store holds an exclusive lock on `<file>.lock` for its lifetime
//! (released by `close`, by dropping the last clone, or by the OS when the process dies), so a
//! second kernel on the same file refuses to start instead of interleaving writes.

use std::fs::File;
use std::path::Path;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use sqlx::migrate::Migrator;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{Connection, SqliteConnection};

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

use super::rows::{EVENT_COLUMNS, EXECUTION_COLUMNS, EventRecord, ExecutionRecord};
use super::{
    SQLITE_NON_TERMINAL, StoreOptions, lock_file, map_sqlx_error, migrate_error,
    refuse_newer_schema, with_context,
};
use connection::WriterOptions;
use writer::WriterThread;

#[cfg(test)]
mod batch_tests;
mod checkpoint;
mod commit_span;
mod connection;
mod event_rows;
mod list;
#[cfg(test)]
mod migration_tests;
mod positions;
mod probe;
mod ready;
mod schema;
mod statements;
mod write;

pub(super) use write::map_rusqlite_error;
#[cfg(test)]
mod write_plan_tests;
mod writer;

/// The index recovery reads, named: without statistics SQLite's planner would rather look the
/// two phases up in `executions_phase_list` and sort every non-terminal execution.
pub(crate) const SQLITE_RECOVERY_INDEX: &str = "INDEXED BY executions_non_terminal";

/// Migrations embedded in the binary, applied at open.
pub(super) static MIGRATOR: Migrator = sqlx::migrate!("migrations/sqlite");

/// Write transactions take the write lock up front, so a busy database fails (or waits for
/// `busy_timeout`) at `BEGIN` instead of deadlocking on a lock upgrade halfway through.
const BEGIN_WRITE: &str = "BEGIN IMMEDIATE";

/// The SQLite store: the writer thread, a read-only pool, the readiness probe's connection
/// and the one-kernel-per-file lock.
#[derive(Clone, Debug)]
pub struct SqliteStore {
    writer: Arc<WriterThread>,
    readers: SqlitePool,
    /// Readiness: takes the write lock without writing (`probe.rs`).
    probe: SqlitePool,
    /// The locked `<file>.lock`, shared by clones; `None` once closed.
    kernel_lock: Arc<Mutex<Option<File>>>,
}

impl SqliteStore {
    /// Opens the database file at `path`, creating it (and its directory) when
    /// `options.create_if_missing` is set, and applies the embedded migrations.
    ///
    /// Fails with `Unavailable` when the file cannot be opened, another kernel holds it
    /// ([`ANOTHER_KERNEL`](super::ANOTHER_KERNEL)) or its schema is newer than this binary.
    pub async fn open(path: &Path, options: &StoreOptions) -> Result<Self, StoreError> {
        let context = format!("opening sqlite database {}", path.display());
        if options.create_if_missing
            && let Some(parent) = path.parent()
            && !parent.as_os_str().is_empty()
        {
            tokio::fs::create_dir_all(parent).await.map_err(|error| {
                StoreError::Unavailable(format!("creating directory {}: {error}", parent.display()))
            })?;
        }
        let base = SqliteConnectOptions::new()
            .filename(path)
            .busy_timeout(options.busy_timeout)
            .foreign_keys(true)
            .synchronous(SqliteSynchronous::Full);
        // Creates the file, sets WAL and migrates; closed once the writer thread is connected,
        // so the file always has a connection open (closing the last one would checkpoint and
        // remove the WAL, which read-only connections cannot recreate).
        let mut migrating = SqliteConnection::connect_with(
            &base
                .clone()
                .create_if_missing(options.create_if_missing)
                .journal_mode(SqliteJournalMode::Wal),
        )
        .await
        .map_err(|error| with_context(map_sqlx_error(error), &context))?;
        // Taken once the file is known to exist and before anything is written to it.
        let kernel_lock = match lock_file::lock_kernel_file(path) {
            Ok(file) => file,
            Err(error) => {
                let _ = migrating.close().await;
                return Err(error);
            }
        };
        let prepared = async {
            refuse_newer_schema(schema::applied_version(&mut migrating).await?, &MIGRATOR)?;
            MIGRATOR
                .run_direct(&mut migrating)
                .await
                .map_err(migrate_error)?;
            let writer_options = WriterOptions {
                busy_timeout: options.busy_timeout,
            };
            WriterThread::start(path, writer_options)
                .await
                .map_err(|error| with_context(error, &context))
        };
        let prepared = prepared.await;
        let _ = migrating.close().await;
        let writer = Arc::new(prepared?);
        let probe = probe::pool(&base, options.busy_timeout);
        let readers = SqlitePoolOptions::new()
            .max_connections(options.max_read_connections.max(1))
            .connect_with(base.read_only(true))
            .await
            .map_err(|error| with_context(map_sqlx_error(error), &context))?;
        Ok(Self {
            writer,
            readers,
            probe,
            kernel_lock: Arc::new(Mutex::new(Some(kernel_lock))),
        })
    }

    /// Closes both pools, waiting for connections in use to be returned, then releases the
    /// kernel lock. Later calls fail with `Unavailable`.
    pub async fn close(&self) {
        self.readers.close().await;
        self.probe.close().await;
        self.writer.close().await;
        // A poisoned lock still guards the file; releasing it is all that is left to do.
        let mut kernel_lock = self
            .kernel_lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        kernel_lock.take();
    }

    /// Returns the reader pool, for tests that inspect the file.
    #[cfg(test)]
    pub(crate) fn readers(&self) -> &SqlitePool {
        &self.readers
    }

    /// Reads an integer pragma of the writer connection, for tests of its settings.
    #[cfg(test)]
    pub(crate) async fn writer_pragma(&self, name: &'static str) -> Result<i64, StoreError> {
        self.writer.pragma(name).await
    }

    /// Keeps the writer thread busy until the returned sender is used or dropped, for tests that
    /// queue groups behind it.
    #[cfg(test)]
    pub(crate) fn hold_writer(&self) -> Result<std::sync::mpsc::Sender<()>, StoreError> {
        self.writer.hold()
    }

    /// Returns how many background checkpoints copied the whole WAL, for tests.
    #[cfg(test)]
    pub(crate) async fn checkpoints(&self) -> Result<u64, StoreError> {
        self.writer.checkpoints().await
    }

    /// Returns how many transactions the writer has committed, for tests that count them.
    #[cfg(test)]
    pub(crate) fn transactions(&self) -> u64 {
        self.writer.transactions()
    }
}

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
        let mut builder = super::bounded::events_query::<sqlx::Sqlite>(
            EVENT_COLUMNS,
            super::bounded::PayloadSize::Sqlite,
            id,
            after_sequence,
            limit,
            max_bytes,
        );
        let rows = builder
            .build_query_as::<super::bounded::SizedEvent>()
            .fetch_all(&self.readers)
            .await
            .map_err(map_sqlx_error)?;
        super::bounded::events_batch(rows, limit, max_bytes)
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
        let sql =
            super::recovery::query("e.created_at", SQLITE_NON_TERMINAL, SQLITE_RECOVERY_INDEX);
        let records = sqlx::query_as::<_, super::recovery::RecoveryRecord>(&sql)
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
        super::tool_calls::sqlite(&self.readers, since).await
    }

    async fn tool_results_since(
        &self,
        since: Timestamp,
    ) -> Result<Vec<keel_actors::store::ToolResult>, StoreError> {
        super::tool_results::sqlite(&self.readers, since).await
    }

    async fn runner_results_since(
        &self,
        since: Timestamp,
    ) -> Result<Vec<RunnerToolResult>, StoreError> {
        super::tool_results::sqlite_runners(&self.readers, since).await
    }

    async fn execution_by_creation_key(
        &self,
        key: &str,
    ) -> Result<Option<ExecutionId>, StoreError> {
        super::creation::sqlite_by_key(&self.readers, key).await
    }

    async fn pending_count(&self, agent_id: Option<&AgentId>) -> Result<u64, StoreError> {
        let agent_id = agent_id.map(AgentId::as_str);
        super::creation::sqlite_count(&self.readers, agent_id).await
    }

    async fn pending_queue(&self, agent_id: &AgentId) -> Result<Vec<PendingEntry>, StoreError> {
        let agent_id = agent_id.as_str();
        super::creation::sqlite_pending(&self.readers, agent_id).await
    }

    async fn active_local_steps(&self, tool_id: &ToolId) -> Result<u64, StoreError> {
        let tool_id = tool_id.as_str();
        super::creation::sqlite_local_steps(&self.readers, tool_id).await
    }

    async fn running_executions(
        &self,
        agent_id: &AgentId,
    ) -> Result<Vec<RunningEntry>, StoreError> {
        let agent_id = agent_id.as_str();
        super::creation::sqlite_running(&self.readers, agent_id).await
    }

    async fn queue_depths(&self) -> Result<QueueDepths, StoreError> {
        super::depths::sqlite(&self.readers).await
    }

    async fn feed(&self, query: &FeedQuery) -> Result<Batch<FeedEvent>, StoreError> {
        super::feed::sqlite_feed(&self.readers, EVENT_COLUMNS, query).await
    }

    async fn head_position(&self) -> Result<i64, StoreError> {
        super::feed::sqlite_head(&self.readers).await
    }

    async fn webhook_positions(&self) -> Result<Vec<(String, i64)>, StoreError> {
        super::feed::sqlite_webhook_positions(&self.readers).await
    }

    async fn set_webhook_position(&self, id: &str, position: i64) -> Result<(), StoreError> {
        self.writer
            .set_webhook_position(id.to_owned(), position)
            .await
    }

    async fn api_keys(&self) -> Result<Vec<keel_actors::store::StoredKey>, StoreError> {
        super::keys::sqlite_keys(&self.readers).await
    }

    async fn put_api_keys(&self, keys: &[keel_actors::store::StoredKey]) -> Result<(), StoreError> {
        self.writer.put_api_keys(keys.to_vec()).await
    }

    async fn count_executions(
        &self,
        filter: &ListFilter,
    ) -> Result<Vec<(ExecutionStatus, u64)>, StoreError> {
        super::overview::sqlite_counts(&self.readers, filter).await
    }

    async fn pending_approvals(&self, limit: i64) -> Result<Vec<PendingApproval>, StoreError> {
        super::overview::sqlite_approvals(&self.readers, limit).await
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
