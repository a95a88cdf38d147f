//! SQLite implementation of the storage port: one file in WAL mode with `synchronous=FULL`,
//! one writer connection (the only one that ever writes: `commit` and retention) and a pool of
//! read-only connections for everything else. Built by [`super::open`] for `sqlite:` URLs.
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
use sqlx::{QueryBuilder, Sqlite, SqliteConnection};

use keel_actors::error::StoreError;
use keel_actors::events::Event;
use keel_actors::ids::ExecutionId;
use keel_actors::store::{AllowedToolCall, Commit, ExecutionRow, ListFilter, RecoveryEntry, Store};
use keel_actors::time::{self, Timestamp};

use super::rows::{EVENT_COLUMNS, EXECUTION_COLUMNS, EventRecord, ExecutionRecord, StepRecord};
use super::{
    StoreOptions, TERMINAL_STATUSES_SQL, expected_previous_sequence, lock_file, map_sqlx_error,
    migrate_error, refuse_newer_schema, sequence_conflict, with_context,
};

mod probe;

/// Migrations embedded in the binary, applied at open.
static MIGRATOR: Migrator = sqlx::migrate!("migrations/sqlite");

/// Write transactions take the write lock up front, so a busy database fails (or waits for
/// `busy_timeout`) at `BEGIN` instead of deadlocking on a lock upgrade halfway through.
const BEGIN_WRITE: &str = "BEGIN IMMEDIATE";

/// The SQLite store: a writer pool of exactly one connection, a read-only pool, the
/// readiness probe's connection and the one-kernel-per-file lock.
#[derive(Clone, Debug)]
pub struct SqliteStore {
    writer: SqlitePool,
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
        // The writer stays connected for the store's lifetime: closing the last connection would
        // checkpoint and remove the WAL, which read-only connections cannot recreate.
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_with(
                base.clone()
                    .create_if_missing(options.create_if_missing)
                    .journal_mode(SqliteJournalMode::Wal),
            )
            .await
            .map_err(|error| with_context(map_sqlx_error(error), &context))?;
        // Taken once the file is known to exist and before anything is written to it.
        let kernel_lock = match lock_file::lock_kernel_file(path) {
            Ok(file) => file,
            Err(error) => {
                writer.close().await;
                return Err(error);
            }
        };
        refuse_newer_schema(applied_schema_version(&writer).await?, &MIGRATOR)?;
        MIGRATOR.run(&writer).await.map_err(migrate_error)?;
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

    /// Returns the writer and reader pools, for tests that inspect the file.
    #[cfg(test)]
    pub(crate) fn pools(&self) -> (&SqlitePool, &SqlitePool) {
        (&self.writer, &self.readers)
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn commit(&self, batch: &[Commit]) -> Result<(), StoreError> {
        if batch.is_empty() {
            return Ok(());
        }
        let mut previous_sequences = Vec::with_capacity(batch.len());
        for commit in batch {
            previous_sequences.push(expected_previous_sequence(commit)?);
        }
        let mut transaction = self
            .writer
            .begin_with(BEGIN_WRITE)
            .await
            .map_err(map_sqlx_error)?;
        for (commit, previous_sequence) in batch.iter().zip(previous_sequences) {
            if let Err(error) = write_commit(&mut transaction, commit, previous_sequence).await {
                // Dropping the transaction rolls back too; doing it here returns the writer clean.
                let _ = transaction.rollback().await;
                return Err(error);
            }
        }
        transaction.commit().await.map_err(map_sqlx_error)
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
        let mut query = QueryBuilder::<Sqlite>::new(format!(
            "SELECT {EXECUTION_COLUMNS} FROM executions AS e WHERE 1 = 1"
        ));
        if let Some(status) = filter.status {
            query.push(" AND e.status = ").push_bind(status.as_str());
        }
        if let Some(agent_id) = &filter.agent_id {
            query
                .push(" AND e.agent_id = ")
                .push_bind(agent_id.as_str());
        }
        for (key, value) in &filter.labels {
            query
                .push(" AND EXISTS (SELECT 1 FROM execution_labels AS l")
                .push(" WHERE l.execution_id = e.id AND l.key = ")
                .push_bind(key.as_str())
                .push(" AND l.value = ")
                .push_bind(value.as_str())
                .push(")");
        }
        if let Some((created_at, id)) = &filter.after {
            // Strictly after (created_at, id) in descending order; written so that the
            // created_at range alone can drive the index.
            let created_at = time::format(created_at);
            query
                .push(" AND e.created_at <= ")
                .push_bind(created_at.clone())
                .push(" AND (e.created_at < ")
                .push_bind(created_at)
                .push(" OR e.id < ")
                .push_bind(id.as_str())
                .push(")");
        }
        query
            .push(" ORDER BY e.created_at DESC, e.id DESC LIMIT ")
            .push_bind(filter.limit.max(0));
        let records = query
            .build_query_as::<ExecutionRecord>()
            .fetch_all(&self.readers)
            .await
            .map_err(map_sqlx_error)?;
        records.into_iter().map(ExecutionRecord::into_row).collect()
    }

    async fn non_terminal_executions(&self) -> Result<Vec<ExecutionId>, StoreError> {
        let sql = format!(
            "SELECT id FROM executions WHERE status NOT IN {TERMINAL_STATUSES_SQL} \
             ORDER BY created_at, id"
        );
        let ids = sqlx::query_scalar::<_, String>(&sql)
            .fetch_all(&self.readers)
            .await
            .map_err(map_sqlx_error)?;
        Ok(ids.into_iter().map(ExecutionId::new).collect())
    }

    async fn recovery_index(&self) -> Result<Vec<RecoveryEntry>, StoreError> {
        let sql = super::recovery::query("e.created_at");
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
        // Without statistics the planner prefers the status index and sorts every terminal row;
        // the partial index yields the oldest ones directly.
        let select = format!(
            "SELECT id FROM executions INDEXED BY executions_terminal_updated \
             WHERE status IN {TERMINAL_STATUSES_SQL} AND updated_at < ? \
             ORDER BY updated_at, id LIMIT ?"
        );
        let mut transaction = self
            .writer
            .begin_with(BEGIN_WRITE)
            .await
            .map_err(map_sqlx_error)?;
        let ids = sqlx::query_scalar::<_, String>(&select)
            .bind(time::format(&before))
            .bind(limit.max(0))
            .fetch_all(&mut *transaction)
            .await
            .map_err(map_sqlx_error)?;
        // Children first: the foreign keys point at `executions`.
        let deletes = [
            "DELETE FROM events WHERE execution_id = ?",
            "DELETE FROM execution_labels WHERE execution_id = ?",
            "DELETE FROM steps WHERE execution_id = ?",
            "DELETE FROM executions WHERE id = ?",
        ];
        for id in &ids {
            for delete in deletes {
                sqlx::query(delete)
                    .bind(id)
                    .execute(&mut *transaction)
                    .await
                    .map_err(map_sqlx_error)?;
            }
        }
        transaction.commit().await.map_err(map_sqlx_error)?;
        Ok(ids.len() as u64)
    }

    async fn tool_calls_since(&self, since: Timestamp) -> Result<Vec<AllowedToolCall>, StoreError> {
        super::tool_calls::sqlite(&self.readers, since).await
    }

    /// Ready when a write could start now: another process holding the write lock makes the
    /// kernel unready within `probe::PROBE_BUSY_TIMEOUT`.
    async fn ping(&self) -> Result<(), StoreError> {
        probe::writable(&self.probe).await
    }
}

/// Writes one execution's commit inside the batch transaction: the projection row (checking
/// that the events follow the stored ones), its labels on first insert, the events and the
/// steps.
async fn write_commit(
    connection: &mut SqliteConnection,
    commit: &Commit,
    previous_sequence: i64,
) -> Result<(), StoreError> {
    let execution = ExecutionRecord::from_row(&commit.execution)?;
    let inserted = sqlx::query(
        "INSERT INTO executions (id, agent_id, status, labels, input, output, created_at, \
         updated_at, session_id, consumer_id, last_sequence) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) \
         ON CONFLICT (id) DO NOTHING",
    )
    .bind(&execution.id)
    .bind(&execution.agent_id)
    .bind(&execution.status)
    .bind(&execution.labels)
    .bind(&execution.input)
    .bind(&execution.output)
    .bind(&execution.created_at)
    .bind(&execution.updated_at)
    .bind(&execution.session_id)
    .bind(&execution.consumer_id)
    .bind(execution.last_sequence)
    .execute(&mut *connection)
    .await
    .map_err(map_sqlx_error)?
    .rows_affected()
        == 1;
    if inserted {
        if previous_sequence != 0 {
            return Err(sequence_conflict(
                &commit.execution.id,
                previous_sequence + 1,
            ));
        }
        for (key, value) in commit.execution.labels.iter().flatten() {
            sqlx::query("INSERT INTO execution_labels (execution_id, key, value) VALUES (?, ?, ?)")
                .bind(&execution.id)
                .bind(key)
                .bind(value)
                .execute(&mut *connection)
                .await
                .map_err(map_sqlx_error)?;
        }
    } else {
        // agent_id, labels, input and created_at are fixed at creation and never rewritten.
        let updated = sqlx::query(
            "UPDATE executions SET status = ?, output = ?, updated_at = ?, session_id = ?, \
             consumer_id = ?, last_sequence = ? WHERE id = ? AND last_sequence = ?",
        )
        .bind(&execution.status)
        .bind(&execution.output)
        .bind(&execution.updated_at)
        .bind(&execution.session_id)
        .bind(&execution.consumer_id)
        .bind(execution.last_sequence)
        .bind(&execution.id)
        .bind(previous_sequence)
        .execute(&mut *connection)
        .await
        .map_err(map_sqlx_error)?;
        if updated.rows_affected() == 0 {
            return Err(sequence_conflict(
                &commit.execution.id,
                previous_sequence + 1,
            ));
        }
    }
    for event in &commit.events {
        insert_event(connection, &EventRecord::from_event(event)?).await?;
    }
    for step in &commit.steps {
        upsert_step(connection, &StepRecord::from_step(step)).await?;
    }
    Ok(())
}

/// Appends one event to the log.
async fn insert_event(
    connection: &mut SqliteConnection,
    event: &EventRecord,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO events (id, execution_id, sequence, step_id, type, schema_version, \
         timestamp, payload, causation_id, correlation_id, idempotency_key) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(&event.id)
    .bind(&event.execution_id)
    .bind(event.sequence)
    .bind(&event.step_id)
    .bind(&event.event_type)
    .bind(event.schema_version)
    .bind(&event.timestamp)
    .bind(&event.payload)
    .bind(&event.causation_id)
    .bind(&event.correlation_id)
    .bind(&event.idempotency_key)
    .execute(&mut *connection)
    .await
    .map_err(map_sqlx_error)?;
    Ok(())
}

/// Inserts or replaces the projection row of one step.
async fn upsert_step(
    connection: &mut SqliteConnection,
    step: &StepRecord,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO steps (id, execution_id, tool_id, status, attempt, max_attempts, remote, \
         job_id, runner_id, deadline, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) \
         ON CONFLICT (id) DO UPDATE SET tool_id = excluded.tool_id, status = excluded.status, \
         attempt = excluded.attempt, max_attempts = excluded.max_attempts, \
         remote = excluded.remote, \
         job_id = excluded.job_id, runner_id = excluded.runner_id, deadline = excluded.deadline, \
         updated_at = excluded.updated_at",
    )
    .bind(&step.id)
    .bind(&step.execution_id)
    .bind(&step.tool_id)
    .bind(&step.status)
    .bind(step.attempt)
    .bind(step.max_attempts)
    .bind(step.remote)
    .bind(&step.job_id)
    .bind(&step.runner_id)
    .bind(&step.deadline)
    .bind(&step.updated_at)
    .execute(&mut *connection)
    .await
    .map_err(map_sqlx_error)?;
    Ok(())
}

/// Returns the newest migration version applied to the database, if it was ever migrated.
async fn applied_schema_version(writer: &SqlitePool) -> Result<Option<i64>, StoreError> {
    let table = sqlx::query_scalar::<_, String>(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations'",
    )
    .fetch_optional(writer)
    .await
    .map_err(map_sqlx_error)?;
    if table.is_none() {
        return Ok(None);
    }
    sqlx::query_scalar::<_, Option<i64>>("SELECT MAX(version) FROM _sqlx_migrations")
        .fetch_one(writer)
        .await
        .map_err(map_sqlx_error)
}
