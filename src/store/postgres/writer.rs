//! The PostgreSQL writer: one dedicated connection that holds the kernel's session-level
//! advisory lock for the store's lifetime and runs every write. Used by `PostgresStore` only.
//!
//! Writing only through the lock-holding session means no write ever runs without the lock.
//! A connection whose state is in doubt (an i/o error, a timeout, a cancelled operation) is
//! dropped, never reused; the next call reconnects and re-takes the lock. If the old session
//! outlives our side of it (a network partition leaves it open on the server, still holding
//! the lock), the reconnect recognises it by pid and start time and terminates it.

use std::future::Future;
use std::time::Duration;

use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection};
use tokio::sync::{Mutex, MutexGuard};

use keel_actors::error::StoreError;

use super::super::{ANOTHER_KERNEL, StoreOptions, map_sqlx_error, with_context};
use super::cluster::{CLUSTER_DATABASE, SINGLE_KERNEL_DATABASE};

/// First key of the kernel lock (`pg_try_advisory_lock(int4, int4)`): "keel" in ASCII. The
/// two-key form never collides with the single `bigint` key sqlx's migrator locks.
pub(super) const LOCK_CLASS: i32 = 0x6b65_656c;

/// Second key of the kernel lock: the one-kernel-per-database lock.
pub(super) const LOCK_KERNEL: i32 = 1;

/// How often a held lock is retried while its holder exits.
const LOCK_POLL: Duration = Duration::from_millis(50);

/// How long a lock held by another session is retried before the kernel gives up: long enough
/// for the server to end the session of a kernel killed just before this one started, short
/// enough that a second kernel started by mistake is refused at once to a person watching.
const LOCK_WAIT: Duration = Duration::from_secs(1);

/// Identifies a server session across pid reuse.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Session {
    pid: i32,
    started: String,
}

/// What the writer mutex guards.
#[derive(Debug, Default)]
struct Slot {
    /// The lock-holding connection, absent until (re)connected.
    connection: Option<PgConnection>,
    /// The server session of the last lock-holding connection, kept after it is dropped.
    session: Option<Session>,
    /// Set by [`Writer::close`]: the lock is released for good and no call reconnects.
    closed: bool,
}

/// The dedicated writer connection and how to re-establish it.
#[derive(Debug)]
pub(super) struct Writer {
    connect_options: PgConnectOptions,
    /// "connecting to postgresql database HOST:PORT/DB", for errors (never the password).
    target: String,
    slot: Mutex<Slot>,
    acquire_timeout: Duration,
    operation_timeout: Duration,
    /// Cluster mode: the kernel lock is taken shared (every cluster kernel holds it; a kernel
    /// started without `--cluster` cannot take it exclusively, nor the reverse).
    shared: bool,
}

/// A writer connection taken out for one operation. Dropping it without [`Checkout::finish`]
/// (a cancelled caller) drops the connection, whose state is then unknown.
pub(super) struct Checkout<'a> {
    slot: MutexGuard<'a, Slot>,
    connection: PgConnection,
}

impl Writer {
    /// Returns a writer that connects with `connect_options`; it has no connection yet.
    pub fn new(connect_options: PgConnectOptions, options: &StoreOptions, shared: bool) -> Self {
        let target = format!(
            "connecting to postgresql database {}:{}/{}",
            connect_options.get_host(),
            connect_options.get_port(),
            connect_options.get_database().unwrap_or("(default)")
        );
        Self {
            connect_options,
            target,
            slot: Mutex::new(Slot::default()),
            acquire_timeout: options.acquire_timeout,
            operation_timeout: options.statement_timeout,
            shared,
        }
    }

    /// Opens a connection and takes the kernel lock on it, without installing it. Fails with
    /// `Unavailable` ([`ANOTHER_KERNEL`]) when another session holds the lock.
    pub async fn connect_and_lock(&self) -> Result<PgConnection, StoreError> {
        let mut slot = self.lock_slot().await?;
        let (connection, session) = self.connect_locked(slot.session.as_ref()).await?;
        slot.session = Some(session);
        Ok(connection)
    }

    /// Installs a connection from [`Writer::connect_and_lock`] as the writer connection.
    pub async fn install(&self, connection: PgConnection) {
        self.slot.lock().await.connection = Some(connection);
    }

    /// Takes the writer connection for one operation, reconnecting (and re-taking the lock)
    /// first when the last one was dropped.
    pub async fn checkout(&self) -> Result<Checkout<'_>, StoreError> {
        let slot = self.lock_slot().await?;
        self.checkout_from(slot).await
    }

    /// Runs one write operation, failing with `Unavailable` when it outlives the statement
    /// timeout (the server cancels statements at the same bound; this also covers a network
    /// that stopped answering).
    pub async fn bounded<T>(
        &self,
        operation: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(self.operation_timeout, operation).await {
            Ok(result) => result,
            Err(_) => Err(StoreError::Unavailable(format!(
                "database write did not finish within {} ms",
                self.operation_timeout.as_millis()
            ))),
        }
    }

    /// Checks that the writer can write: asks its session whether it is read-only, reconnecting
    /// first when it has no connection. A write in progress counts as healthy (its own outcome
    /// reports trouble).
    pub async fn check(&self) -> Result<(), StoreError> {
        let Ok(slot) = self.slot.try_lock() else {
            return Ok(());
        };
        let mut checkout = self.checkout_from(slot).await?;
        let read_only =
            sqlx::query_scalar::<_, bool>("SELECT current_setting('transaction_read_only') = 'on'")
                .fetch_one(checkout.connection())
                .await
                .map_err(map_sqlx_error);
        let outcome = match read_only {
            Ok(false) => Ok(()),
            // Dropping the connection lets the next call land on a writable server.
            Ok(true) => Err(StoreError::Unavailable(
                "the database is read-only".to_owned(),
            )),
            Err(error) => Err(error),
        };
        checkout.finish(outcome)
    }

    /// Releases the kernel lock and closes the writer connection. The explicit unlock means a
    /// kernel opening the database right after this returns finds the lock free; a write
    /// arriving later fails with `Unavailable` instead of reconnecting, which would take the
    /// lock back from under that kernel.
    pub async fn close(&self) {
        let connection = {
            let mut slot = self.slot.lock().await;
            slot.closed = true;
            slot.connection.take()
        };
        let Some(mut connection) = connection else {
            return;
        };
        let release = async {
            let unlock = if self.shared {
                "SELECT pg_advisory_unlock_shared($1, $2)"
            } else {
                "SELECT pg_advisory_unlock($1, $2)"
            };
            let _ = sqlx::query(unlock)
                .bind(LOCK_CLASS)
                .bind(LOCK_KERNEL)
                .execute(&mut connection)
                .await;
            let _ = connection.close().await;
        };
        let _ = tokio::time::timeout(self.acquire_timeout, release).await;
    }

    /// Waits for the writer mutex, at most `acquire_timeout` (a write holds it for at most the
    /// statement timeout).
    async fn lock_slot(&self) -> Result<MutexGuard<'_, Slot>, StoreError> {
        tokio::time::timeout(self.acquire_timeout, self.slot.lock())
            .await
            .map_err(|_| {
                StoreError::Unavailable(format!(
                    "timed out after {} ms waiting for the database writer",
                    self.acquire_timeout.as_millis()
                ))
            })
    }

    /// Like [`Writer::checkout`] with the mutex already held.
    async fn checkout_from<'a>(
        &'a self,
        mut slot: MutexGuard<'a, Slot>,
    ) -> Result<Checkout<'a>, StoreError> {
        let connection = match slot.connection.take() {
            Some(connection) => connection,
            None if slot.closed => {
                return Err(StoreError::Unavailable(
                    "the database writer is closed".to_owned(),
                ));
            }
            None => {
                let (connection, session) = self.connect_locked(slot.session.as_ref()).await?;
                tracing::info!(db.pid = session.pid, "database writer reconnected");
                slot.session = Some(session);
                connection
            }
        };
        Ok(Checkout { slot, connection })
    }

    /// Connects and takes the kernel lock. When the lock is held by `previous`, our own
    /// session left behind by a broken connection, terminates it and tries once more; when
    /// another session holds it, retries for [`Writer::lock_wait`] before refusing.
    async fn connect_locked(
        &self,
        previous: Option<&Session>,
    ) -> Result<(PgConnection, Session), StoreError> {
        let connect = async {
            let mut connection = PgConnection::connect_with(&self.connect_options)
                .await
                .map_err(|error| with_context(map_sqlx_error(error), &self.target))?;
            let session = current_session(&mut connection).await?;
            if try_lock(&mut connection, self.shared).await? {
                return Ok((connection, session));
            }
            let mut orphan = false;
            if !self.shared
                && let Some(previous) = previous
                && terminate_if_holder(&mut connection, previous).await?
            {
                tracing::warn!(
                    db.pid = previous.pid,
                    "terminated this kernel's orphaned database session to retake its lock"
                );
                orphan = true;
            }
            // A terminated orphan releases the lock as it exits, shortly after the signal (the
            // overall connect bound ends that wait). Another holder may be a kernel killed a
            // moment ago: the server ends its session once it reads the closed socket, which a
            // restart can outrun.
            let waiting = tokio::time::Instant::now();
            while orphan || waiting.elapsed() < self.lock_wait() {
                tokio::time::sleep(LOCK_POLL).await;
                if try_lock(&mut connection, self.shared).await? {
                    return Ok((connection, session));
                }
            }
            if self.shared {
                return Err(StoreError::Unavailable(SINGLE_KERNEL_DATABASE.to_owned()));
            }
            if super::cluster::is_cluster(&mut connection).await? {
                return Err(StoreError::Unavailable(CLUSTER_DATABASE.to_owned()));
            }
            Err(StoreError::Unavailable(format!(
                "{ANOTHER_KERNEL} (it holds the advisory lock pg_advisory_lock({LOCK_CLASS}, \
                 {LOCK_KERNEL})); stop that kernel or point this one at another database"
            )))
        };
        match tokio::time::timeout(self.acquire_timeout, connect).await {
            Ok(result) => result,
            Err(_) => Err(StoreError::Unavailable(format!(
                "{}: no answer within {} ms",
                self.target,
                self.acquire_timeout.as_millis()
            ))),
        }
    }

    /// How long a held lock is retried before another kernel is reported: [`LOCK_WAIT`],
    /// within half the connect bound so that the refusal, not the timeout, is what fails.
    fn lock_wait(&self) -> Duration {
        LOCK_WAIT.min(self.acquire_timeout / 2)
    }
}

impl Checkout<'_> {
    /// Returns the connection to run the operation on.
    pub fn connection(&mut self) -> &mut PgConnection {
        &mut self.connection
    }

    /// Ends the operation: keeps the connection unless the outcome says it may be broken
    /// (`Unavailable`: i/o, timeouts, server shutdown, read-only), then returns the outcome.
    pub fn finish<T>(self, outcome: Result<T, StoreError>) -> Result<T, StoreError> {
        let Self {
            mut slot,
            connection,
        } = self;
        match &outcome {
            Err(StoreError::Unavailable(reason)) => {
                tracing::warn!(error = %reason, "database writer connection dropped");
                drop(connection);
            }
            _ => slot.connection = Some(connection),
        }
        outcome
    }
}

/// Returns the server session behind `connection`.
async fn current_session(connection: &mut PgConnection) -> Result<Session, StoreError> {
    let (pid, started) = sqlx::query_as::<_, (i32, String)>(
        "SELECT pid, backend_start::text FROM pg_stat_activity WHERE pid = pg_backend_pid()",
    )
    .fetch_one(&mut *connection)
    .await
    .map_err(map_sqlx_error)?;
    Ok(Session { pid, started })
}

/// Tries to take the kernel lock (`shared`: in cluster mode) without waiting; returns whether
/// this session holds it.
async fn try_lock(connection: &mut PgConnection, shared: bool) -> Result<bool, StoreError> {
    let lock = if shared {
        "SELECT pg_try_advisory_lock_shared($1, $2)"
    } else {
        "SELECT pg_try_advisory_lock($1, $2)"
    };
    sqlx::query_scalar::<_, bool>(lock)
        .bind(LOCK_CLASS)
        .bind(LOCK_KERNEL)
        .fetch_one(&mut *connection)
        .await
        .map_err(map_sqlx_error)
}

/// Terminates `previous` if it is still the session holding the kernel lock (same pid and
/// start time, so a reused pid is never hit); returns whether it was terminated.
async fn terminate_if_holder(
    connection: &mut PgConnection,
    previous: &Session,
) -> Result<bool, StoreError> {
    let terminated = sqlx::query_scalar::<_, bool>(
        "SELECT pg_terminate_backend(a.pid) FROM pg_locks AS l \
         JOIN pg_stat_activity AS a ON a.pid = l.pid \
         WHERE l.locktype = 'advisory' AND l.database = \
         (SELECT oid FROM pg_database WHERE datname = current_database()) \
         AND l.classid = $1::int4::oid AND l.objid = $2::int4::oid AND l.objsubid = 2 \
         AND l.granted AND a.pid = $3 AND a.backend_start::text = $4",
    )
    .bind(LOCK_CLASS)
    .bind(LOCK_KERNEL)
    .bind(previous.pid)
    .bind(&previous.started)
    .fetch_optional(&mut *connection)
    .await
    .map_err(map_sqlx_error)?;
    Ok(terminated == Some(true))
}
