//! Storage adapters: the SQL implementations of the `keel_actors::store::Store` port. [`open`]
//! picks the backend from the store URL (`sqlite://PATH`, `sqlite:PATH`, `postgres://...`,
//! `postgresql://...`) and startup hands the result to the actor tree as `Arc<dyn Store>`.
//!
//! This module also holds what every backend shares: options, the mapping of sqlx errors to
//! [`StoreError`], the checks a [`Commit`] must pass before it is written, and the refusal to run
//! on a schema newer than the binary. sqlx types never leave `src/store/`.
//!
//! Both backends allow one kernel per database: the second `open` of a database in use fails
//! with `Unavailable` ([`ANOTHER_KERNEL`]), via a `.lock` file next to a SQLite database and a
//! session-level advisory lock on PostgreSQL.

mod bounded;
mod creation;
mod depths;
mod feed;
mod filter;
mod keys;
mod lock_file;
mod overview;
pub mod postgres;
mod recovery;
mod rows;
pub mod sqlite;
mod tool_calls;
mod tool_results;

#[cfg(test)]
pub(crate) mod conformance;
#[cfg(test)]
mod sqlite_lock_tests;
#[cfg(test)]
mod tests;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use keel_actors::error::StoreError;
pub use keel_actors::store::{Commit, ExecutionRow, ListFilter, StepRow, Store};
pub use postgres::PostgresStore;
pub use sqlite::SqliteStore;

/// Start of the message of the `Unavailable` error a second kernel gets when it opens a database
/// that a running kernel holds.
pub const ANOTHER_KERNEL: &str = "another keel kernel is using this database";

/// SQL list of the terminal execution statuses, as the migrations spell it (PostgreSQL's 0001
/// and 0007); a test checks it names exactly the terminal statuses.
#[cfg(test)]
pub(crate) const TERMINAL_STATUSES_SQL: &str = "('completed', 'failed', 'cancelled')";

/// SQLite: the execution is not terminal. The indexes of `executions` read its `phase` column,
/// never `status`, so that the flips between `running` and `blocked` leave them alone
/// (migration 0009); queries must use the same words to be answered by them. SQLite evaluates a
/// constant `IN` list of more than two values by building a temporary b-tree per statement run,
/// so its predicates are spelled as comparisons (migration 0006).
pub(crate) const SQLITE_NON_TERMINAL: &str = "(phase = 'pending' OR phase = 'active')";

/// PostgreSQL: the execution is not terminal. The indexes of `executions` read its generated
/// `phase` column, never `status`, so that the flips between `running` and `blocked` leave
/// them alone (migration 0007); queries must use the same words to be answered by them.
pub(crate) const PG_NON_TERMINAL: &str = "phase IN ('pending', 'active')";

/// The execution is pending, as the indexes of both backends read it (`phase`: PostgreSQL's
/// migration 0007, SQLite's 0009).
pub(crate) const PENDING: &str = "phase = 'pending'";

/// PostgreSQL: the text of the top-level `key` of the `json` column `column`, NULL when absent.
///
/// `->>` over a `json` value de-escapes every string of the document, and PostgreSQL cannot
/// de-escape `\u0000` (a NUL a client may put in any input, argument or error), so a plain
/// `column ->> 'key'` fails on such a row and with it the whole read of every other row. A
/// document that holds the escape has it rewritten to `\uFFFD` first: the escape and its
/// replacement have the same shape, so the text stays valid JSON wherever the six characters
/// stand (also after an escaped backslash), and only the values that held a NUL change.
/// Documents without it (all but hostile ones) are read as before.
pub(crate) fn pg_json_text(column: &str, key: &str) -> String {
    format!(
        "(CASE WHEN strpos({column}::text, E'\\\\u0000') > 0 \
         THEN replace({column}::text, E'\\\\u0000', E'\\\\uFFFD')::json ->> '{key}' \
         ELSE {column} ->> '{key}' END)"
    )
}

/// The `phase` column value of a status (PostgreSQL's migration 0007, SQLite's 0009): running
/// and blocked executions are `active`, every other status is its own phase.
pub(crate) fn phase(status: keel_actors::status::ExecutionStatus) -> &'static str {
    use keel_actors::status::ExecutionStatus;
    match status {
        ExecutionStatus::Running | ExecutionStatus::Blocked => "active",
        other => other.as_str(),
    }
}

/// What the PostgreSQL store asks cluster mode before every write (docs/architecture.md,
/// "Cluster"): the epoch at which this kernel holds a partition, `None` when it may not act on
/// it now. Implemented by `crate::cluster::Ownership`.
pub trait PartitionFence: Send + Sync + std::fmt::Debug {
    /// The partition count P.
    fn partitions(&self) -> u32;
    /// The epoch `partition` is held at, if this kernel may write to it now.
    fn epoch(&self, partition: u32) -> Option<i64>;
    /// Counts a commit refused because this kernel does not hold `partition` (`/metrics`).
    fn refused(&self, _partition: u32) {}
    /// Called after events were committed (cluster mode wakes the other kernels' readers).
    fn committed(&self) {}
    /// Changes when another kernel may have committed events; `None` when nothing says so
    /// (readers then poll).
    fn commit_wakeups(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        None
    }
}

/// The partition of an execution: FNV-1a (32 bits) of the id's UTF-8 bytes modulo
/// `partitions`. Stable across builds and platforms; PostgreSQL's `keel_partition` (migration
/// 0011) computes the same.
pub fn partition_of(id: &str, partitions: u32) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for byte in id.as_bytes() {
        hash ^= u32::from(*byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash % partitions.max(1)
}

/// How a store is opened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreOptions {
    /// Connections in the read pool (at least one is used). Both backends add exactly one
    /// writer connection, so PostgreSQL sees at most `max_read_connections + 1` sessions.
    pub max_read_connections: u32,
    /// SQLite: how long a statement waits for a lock held by another connection before failing.
    pub busy_timeout: Duration,
    /// SQLite: whether a missing database file (and its directory) is created. PostgreSQL
    /// databases are never created.
    pub create_if_missing: bool,
    /// PostgreSQL: how long an operation waits for a connection, including reconnecting after
    /// an outage, before failing with `Unavailable`.
    pub acquire_timeout: Duration,
    /// PostgreSQL: the longest one operation (a statement, or a whole commit transaction) may
    /// run before it is cancelled and fails with `Unavailable`. Migrations at open are exempt.
    pub statement_timeout: Duration,
    /// PostgreSQL: `Some(P)` opens the database as one kernel of a cluster with `P` partitions
    /// (`keel serve --cluster`): a shared instead of the exclusive kernel lock, the database
    /// marked as a cluster database. `None`: the one-kernel mode, which refuses a cluster
    /// database. SQLite refuses `Some`.
    pub cluster_partitions: Option<u32>,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            max_read_connections: 4,
            busy_timeout: Duration::from_secs(5),
            create_if_missing: true,
            acquire_timeout: Duration::from_secs(2),
            statement_timeout: Duration::from_secs(5),
            cluster_partitions: None,
        }
    }
}

/// Opens the store named by `url`, creating and migrating it as needed.
///
/// Accepts `sqlite://PATH` and `sqlite:PATH` (a relative or absolute file path) and
/// `postgres://...` / `postgresql://...` (a libpq-style URL). Fails with `Unavailable` for other
/// schemes, when the database cannot be opened, when another kernel holds it
/// ([`ANOTHER_KERNEL`]), and when its schema is newer than this binary.
pub async fn open(url: &str, options: &StoreOptions) -> Result<Arc<dyn Store>, StoreError> {
    match parse_url(url)? {
        Backend::Sqlite(_) if options.cluster_partitions.is_some() => Err(StoreError::Unavailable(
            "cluster mode needs a PostgreSQL database; SQLite serves one kernel".to_owned(),
        )),
        Backend::Sqlite(path) => {
            let store = SqliteStore::open(&path, options).await?;
            Ok(Arc::new(store))
        }
        Backend::Postgres => {
            let store = PostgresStore::open(url, options).await?;
            Ok(Arc::new(store))
        }
    }
}

/// Opens a PostgreSQL database as one kernel of a cluster (`options.cluster_partitions` must
/// be set): every write is fenced on the partitions `fence` says this kernel holds.
pub async fn open_cluster(
    url: &str,
    options: &StoreOptions,
    fence: Arc<dyn PartitionFence>,
) -> Result<Arc<dyn Store>, StoreError> {
    match parse_url(url)? {
        Backend::Postgres if options.cluster_partitions.is_some() => {
            let store = PostgresStore::open_fenced(url, options, Some(fence)).await?;
            Ok(Arc::new(store))
        }
        _ => Err(StoreError::Unavailable(
            "cluster mode needs a PostgreSQL database; SQLite serves one kernel".to_owned(),
        )),
    }
}

/// Backend named by a store URL.
#[derive(Debug, PartialEq)]
enum Backend {
    /// A SQLite database file.
    Sqlite(PathBuf),
    /// A PostgreSQL server; the URL is passed on as given.
    Postgres,
}

/// Splits a store URL into its backend and location. Never echoes a whole URL back, since a
/// PostgreSQL URL may carry a password.
fn parse_url(url: &str) -> Result<Backend, StoreError> {
    if let Some(path) = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
    {
        if path.is_empty() || path == ":memory:" {
            return Err(StoreError::Unavailable(format!(
                "store url {url:?} must name a database file (in-memory sqlite is not supported)"
            )));
        }
        if path.contains('?') {
            return Err(StoreError::Unavailable(format!(
                "store url {url:?} has query parameters, which are not supported"
            )));
        }
        return Ok(Backend::Sqlite(PathBuf::from(path)));
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Ok(Backend::Postgres);
    }
    let scheme = url.split_once(':').map_or("", |(scheme, _)| scheme);
    Err(StoreError::Unavailable(format!(
        "unsupported store url scheme {scheme:?}, expected sqlite://PATH or postgres://..."
    )))
}

/// Checks that a commit is internally consistent and returns the stored last sequence its
/// events must follow. A failure here is a caller bug, hence `Internal`.
fn expected_previous_sequence(commit: &Commit) -> Result<i64, StoreError> {
    let execution = &commit.execution;
    let id = &execution.id;
    for step in &commit.steps {
        if step.execution_id != *id {
            return Err(StoreError::Internal(format!(
                "commit for execution {id} carries step {} of execution {}",
                step.id, step.execution_id
            )));
        }
    }
    let (Some(first), Some(last)) = (commit.events.first(), commit.events.last()) else {
        return Ok(execution.last_sequence);
    };
    for (offset, event) in (0_i64..).zip(&commit.events) {
        if event.execution_id != *id {
            return Err(StoreError::Internal(format!(
                "commit for execution {id} carries event {} of execution {}",
                event.id, event.execution_id
            )));
        }
        if event.sequence != first.sequence + offset {
            return Err(StoreError::Internal(format!(
                "commit for execution {id} has non-contiguous event sequences ({} after {})",
                event.sequence,
                first.sequence + offset - 1
            )));
        }
    }
    if execution.last_sequence != last.sequence {
        return Err(StoreError::Internal(format!(
            "commit for execution {id} sets last_sequence {} but its last event has sequence {}",
            execution.last_sequence, last.sequence
        )));
    }
    Ok(first.sequence - 1)
}

/// Returns the error for events that do not follow the stored ones.
fn sequence_conflict(id: &keel_actors::ids::ExecutionId, first_sequence: i64) -> StoreError {
    StoreError::Conflict(format!(
        "execution {id}: event sequence {first_sequence} does not follow the stored last sequence \
         (already taken or out of order)"
    ))
}

/// Fails when the database was migrated by a newer binary: its newest applied migration is
/// newer than every migration `migrator` embeds. Runs before the migrator, whose own error
/// ("migration N was previously applied but is missing") would not say what to do.
fn refuse_newer_schema(
    applied: Option<i64>,
    migrator: &sqlx::migrate::Migrator,
) -> Result<(), StoreError> {
    let supported = migrator
        .iter()
        .map(|migration| migration.version)
        .max()
        .unwrap_or(0);
    match applied {
        Some(found) if found > supported => Err(StoreError::Unavailable(format!(
            "database schema version {found} is newer than this keel binary supports ({supported})"
        ))),
        _ => Ok(()),
    }
}

/// Prefixes an error's message with what was being done, keeping its class.
fn with_context(error: StoreError, context: &str) -> StoreError {
    match error {
        StoreError::NotFound(message) => StoreError::NotFound(format!("{context}: {message}")),
        StoreError::Conflict(message) => StoreError::Conflict(format!("{context}: {message}")),
        StoreError::Unavailable(message) => {
            StoreError::Unavailable(format!("{context}: {message}"))
        }
        StoreError::Internal(message) => StoreError::Internal(format!("{context}: {message}")),
    }
}

/// Maps a migration failure; the database is unusable until it is fixed.
fn migrate_error(error: sqlx::migrate::MigrateError) -> StoreError {
    StoreError::Unavailable(format!("database migration failed: {error}"))
}

/// Maps a sqlx error to the port's error classes.
fn map_sqlx_error(error: sqlx::Error) -> StoreError {
    match error {
        sqlx::Error::RowNotFound => StoreError::NotFound("row not found".to_owned()),
        sqlx::Error::PoolTimedOut => {
            StoreError::Unavailable("timed out waiting for a database connection".to_owned())
        }
        sqlx::Error::PoolClosed => StoreError::Unavailable("database pool is closed".to_owned()),
        sqlx::Error::WorkerCrashed => StoreError::Unavailable("database worker crashed".to_owned()),
        sqlx::Error::Io(error) => StoreError::Unavailable(format!("database i/o error: {error}")),
        sqlx::Error::Tls(error) => StoreError::Unavailable(format!("database tls error: {error}")),
        sqlx::Error::Database(error) => {
            let message = error.message().to_owned();
            if error.is_unique_violation() {
                StoreError::Conflict(message)
            } else if is_unavailable(error.as_ref()) {
                StoreError::Unavailable(message)
            } else {
                StoreError::Internal(message)
            }
        }
        other => StoreError::Internal(other.to_string()),
    }
}

/// Returns whether a database error means "cannot serve now" rather than a bug.
fn is_unavailable(error: &dyn sqlx::error::DatabaseError) -> bool {
    let Some(code) = error.code() else {
        return false;
    };
    if error
        .try_downcast_ref::<sqlx::sqlite::SqliteError>()
        .is_some()
    {
        sqlite_code_is_unavailable(&code)
    } else {
        sqlstate_is_unavailable(&code)
    }
}

/// Returns whether a SQLite result code is busy, locked, read-only, i/o, full or cannot-open.
fn sqlite_code_is_unavailable(code: &str) -> bool {
    const BUSY: i32 = 5;
    const LOCKED: i32 = 6;
    const READONLY: i32 = 8;
    const IOERR: i32 = 10;
    const FULL: i32 = 13;
    const CANTOPEN: i32 = 14;
    // SQLite reports extended result codes; the primary code is the low byte.
    code.parse::<i32>().is_ok_and(|extended| {
        matches!(
            extended & 0xff,
            BUSY | LOCKED | READONLY | IOERR | FULL | CANTOPEN
        )
    })
}

/// Returns whether a PostgreSQL SQLSTATE is a connection exception, insufficient resources,
/// operator intervention, a read-only transaction or a lock not available.
fn sqlstate_is_unavailable(code: &str) -> bool {
    code.starts_with("08")
        || code.starts_with("53")
        || code.starts_with("57")
        || code == "25006"
        || code == "55P03"
}
