//! The writer thread's connection (`writer.rs`): how it is opened, and what it writes with.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use keel_actors::error::StoreError;

use super::checkpoint::WRITER_AUTOCHECKPOINT;
use super::positions::EventPositions;
use super::ready::ReadyCommit;
use super::write::{commit_group, in_transaction, map_rusqlite_error};

/// Prepared statements kept per connection: the commit's six and its six event inserts
/// of 1 to 32 rows (`event_rows.rs`), retention's five and the webhook position's.
const STATEMENT_CACHE: usize = 32;

/// How the writer connection is opened.
pub(super) struct WriterOptions {
    pub busy_timeout: Duration,
}

/// What the thread writes with: its connection, the event positions it hands out and the count
/// of its transactions.
pub(super) struct Writer {
    pub connection: Connection,
    positions: EventPositions,
    transactions: Arc<AtomicU64>,
}

impl Writer {
    /// Opens the connection (see [`open`]) and loads the last event position handed out.
    pub fn open(
        path: &Path,
        options: &WriterOptions,
        transactions: Arc<AtomicU64>,
    ) -> Result<Self, StoreError> {
        let connection = open(path, options)?;
        let positions = EventPositions::load(&connection)?;
        Ok(Self {
            connection,
            positions,
            transactions,
        })
    }

    pub fn commit_group(
        &mut self,
        group: &[ReadyCommit],
        all_or_nothing: bool,
    ) -> Vec<Result<(), StoreError>> {
        commit_group(
            &mut self.connection,
            group,
            all_or_nothing,
            &self.transactions,
            &mut self.positions,
        )
    }

    pub fn in_transaction<T>(
        &mut self,
        work: impl FnOnce(&Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        in_transaction(&mut self.connection, &self.transactions, work)
    }
}

/// Opens the writer connection with the store's settings: WAL (already set on the file by the
/// migrating connection), `synchronous=FULL`, `busy_timeout`, and its own automatic checkpoint
/// only as a fallback for the checkpoint thread.
///
/// Foreign keys are not enforced on this connection, as PostgreSQL has none (its migration
/// 0006): checking them cost an index probe of `executions` for every event, step and label
/// written, 2–3 % of the kernel's instructions (docs/benchmarks.md), and they cannot fire. The
/// writer writes a child only after its execution's row in the same commit (a commit whose row
/// is not written fails before its children are), `Commit` validation refuses children of
/// another execution, and retention deletes children before their execution in one
/// transaction. The schema keeps its `REFERENCES`, so `PRAGMA foreign_key_check` still
/// verifies a database (`batch_tests.rs` does, after the cases that could leave an orphan).
fn open(path: &Path, options: &WriterOptions) -> Result<Connection, StoreError> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let connection = Connection::open_with_flags(path, flags).map_err(|error| {
        StoreError::Unavailable(format!(
            "opening sqlite database {} for writing: {}",
            path.display(),
            map_rusqlite_error(error)
        ))
    })?;
    connection
        .busy_timeout(options.busy_timeout)
        .map_err(map_rusqlite_error)?;
    connection
        .execute_batch(&format!(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA foreign_keys = OFF; \
             PRAGMA wal_autocheckpoint = {WRITER_AUTOCHECKPOINT};"
        ))
        .map_err(map_rusqlite_error)?;
    connection.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    Ok(connection)
}
