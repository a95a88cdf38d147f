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

use sqlx::migrate::Migrator;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{Connection, SqliteConnection};

use keel_actors::error::StoreError;

use super::{
    StoreOptions, lock_file, map_sqlx_error, migrate_error, refuse_newer_schema, with_context,
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
mod port;
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
