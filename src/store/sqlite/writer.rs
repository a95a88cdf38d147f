//! The SQLite writer thread: one OS thread owning the store's only writing connection (a
//! rusqlite connection on the same SQLite library as sqlx). The async side sends it whole
//! groups of commits over a channel; it runs each group in one `BEGIN IMMEDIATE … COMMIT`
//! transaction with cached prepared statements and answers through a oneshot once `COMMIT`
//! has returned (with `synchronous=FULL`, once the WAL is on disk). A group costs one thread
//! hop there and one back, however many rows it writes.
//!
//! Retention deletes run here too, since only this connection writes.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, TransactionBehavior};
use tokio::sync::oneshot;

use keel_actors::error::StoreError;
use keel_actors::store::Commit;

use super::super::expected_previous_sequence;
use super::write::{self, map_rusqlite_error};

/// Prepared statements kept per connection: the commit's five and retention's five.
const STATEMENT_CACHE: usize = 32;

/// Work for the writer thread.
enum Request {
    /// Commit a group; `all_or_nothing` fails the whole group on the first failing commit
    /// (`Store::commit`), otherwise a failing commit fails alone (`Store::commit_group`).
    Commit {
        group: Vec<Commit>,
        all_or_nothing: bool,
        reply: oneshot::Sender<Vec<Result<(), StoreError>>>,
    },
    /// Retention: delete up to `limit` terminal executions updated before `before`.
    DeleteTerminal {
        before: String,
        limit: i64,
        reply: oneshot::Sender<Result<u64, StoreError>>,
    },
    /// Records a webhook subscription's acknowledged position.
    SetWebhookPosition {
        id: String,
        position: i64,
        reply: oneshot::Sender<Result<(), StoreError>>,
    },
    /// Reads one integer pragma of the writer connection (tests check its settings).
    #[cfg(test)]
    Pragma {
        name: &'static str,
        reply: oneshot::Sender<Result<i64, StoreError>>,
    },
    /// Stop: close the connection, then answer.
    Close { reply: oneshot::Sender<()> },
}

/// The async side's handle on the writer thread. Dropping every handle (every clone of the
/// store) also stops the thread and closes its connection.
#[derive(Debug)]
pub(super) struct WriterThread {
    requests: mpsc::Sender<Request>,
    /// Transactions committed, for tests that count them.
    #[cfg_attr(not(test), allow(dead_code))]
    transactions: Arc<AtomicU64>,
}

/// How the writer connection is opened.
pub(super) struct WriterOptions {
    pub busy_timeout: Duration,
}

impl WriterThread {
    /// Opens the writer connection to the (existing, migrated) database at `path` on a new
    /// thread. Fails with `Unavailable` when the file cannot be opened for writing.
    pub async fn start(path: &Path, options: WriterOptions) -> Result<Self, StoreError> {
        let (requests, receiver) = mpsc::channel();
        let (opened, opened_reply) = oneshot::channel();
        let transactions = Arc::new(AtomicU64::new(0));
        let path = path.to_owned();
        let counter = transactions.clone();
        std::thread::Builder::new()
            .name("keel-sqlite-writer".to_owned())
            .spawn(move || match open(&path, &options) {
                Ok(connection) => {
                    let _ = opened.send(Ok(()));
                    serve(connection, &receiver, &counter);
                }
                Err(error) => {
                    let _ = opened.send(Err(error));
                }
            })
            .map_err(|error| {
                StoreError::Unavailable(format!("starting the sqlite writer thread: {error}"))
            })?;
        opened_reply.await.map_err(|_| stopped())??;
        Ok(Self {
            requests,
            transactions,
        })
    }

    /// Commits `group` in one transaction; see [`Request::Commit`].
    pub async fn commit(
        &self,
        group: Vec<Commit>,
        all_or_nothing: bool,
    ) -> Vec<Result<(), StoreError>> {
        let size = group.len();
        let (reply, answer) = oneshot::channel();
        let request = Request::Commit {
            group,
            all_or_nothing,
            reply,
        };
        match self.ask(request, answer).await {
            Ok(results) => results,
            Err(error) => vec![Err(error); size],
        }
    }

    /// Deletes up to `limit` terminal executions updated before `before` (RFC 3339).
    pub async fn delete_terminal_before(
        &self,
        before: String,
        limit: i64,
    ) -> Result<u64, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.ask(
            Request::DeleteTerminal {
                before,
                limit,
                reply,
            },
            answer,
        )
        .await?
    }

    /// Upserts webhook subscription `id`'s acknowledged position.
    pub async fn set_webhook_position(&self, id: String, position: i64) -> Result<(), StoreError> {
        let (reply, answer) = oneshot::channel();
        self.ask(
            Request::SetWebhookPosition {
                id,
                position,
                reply,
            },
            answer,
        )
        .await?
    }

    /// Reads an integer pragma of the writer connection.
    #[cfg(test)]
    pub async fn pragma(&self, name: &'static str) -> Result<i64, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.ask(Request::Pragma { name, reply }, answer).await?
    }

    /// Returns how many transactions the thread has committed.
    #[cfg(test)]
    pub fn transactions(&self) -> u64 {
        self.transactions.load(Ordering::Relaxed)
    }

    /// Closes the connection and waits until it is closed. Later requests fail with
    /// `Unavailable`.
    pub async fn close(&self) {
        let (reply, answer) = oneshot::channel();
        let _ = self.ask(Request::Close { reply }, answer).await;
    }

    /// Sends a request and waits for its answer.
    async fn ask<T>(
        &self,
        request: Request,
        answer: oneshot::Receiver<T>,
    ) -> Result<T, StoreError> {
        self.requests.send(request).map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())
    }
}

/// The error of a request the thread cannot take (closed store, or the thread is gone).
fn stopped() -> StoreError {
    StoreError::Unavailable("the sqlite writer is closed".to_owned())
}

/// Opens the writer connection with the store's settings: WAL (already set on the file by the
/// migrating connection), `synchronous=FULL`, foreign keys, `busy_timeout`.
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
        .execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;",
        )
        .map_err(map_rusqlite_error)?;
    connection.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    Ok(connection)
}

/// Serves requests until `Close` or until every handle is dropped.
fn serve(mut connection: Connection, requests: &mpsc::Receiver<Request>, transactions: &AtomicU64) {
    while let Ok(request) = requests.recv() {
        match request {
            Request::Commit {
                group,
                all_or_nothing,
                reply,
            } => {
                let results = commit_group(&mut connection, &group, all_or_nothing, transactions);
                let _ = reply.send(results);
            }
            Request::DeleteTerminal {
                before,
                limit,
                reply,
            } => {
                let result = in_transaction(&mut connection, transactions, |connection| {
                    write::delete_terminal_before(connection, &before, limit)
                });
                let _ = reply.send(result);
            }
            Request::SetWebhookPosition {
                id,
                position,
                reply,
            } => {
                let result = in_transaction(&mut connection, transactions, |connection| {
                    write::set_webhook_position(connection, &id, position)
                });
                let _ = reply.send(result);
            }
            #[cfg(test)]
            Request::Pragma { name, reply } => {
                let result = connection
                    .query_row(&format!("PRAGMA {name}"), [], |row| row.get(0))
                    .map_err(map_rusqlite_error);
                let _ = reply.send(result);
            }
            Request::Close { reply } => {
                // Closing the last connection checkpoints the WAL; it must finish before the
                // caller releases the kernel lock.
                drop(connection);
                let _ = reply.send(());
                return;
            }
        }
    }
}

/// Commits a group: checks every commit, then writes the ones that pass in one transaction.
/// When a commit fails while being written, the transaction is rolled back and, unless the
/// group is all or nothing, that commit fails alone and the others are written again in a new
/// transaction (as if it had been submitted alone, after the ones before it). `Unavailable`
/// fails every commit that is not already failed.
fn commit_group(
    connection: &mut Connection,
    group: &[Commit],
    all_or_nothing: bool,
    transactions: &AtomicU64,
) -> Vec<Result<(), StoreError>> {
    let mut results: Vec<Result<(), StoreError>> = Vec::with_capacity(group.len());
    let mut pending: Vec<(usize, i64)> = Vec::with_capacity(group.len());
    for (index, commit) in group.iter().enumerate() {
        match expected_previous_sequence(commit) {
            Ok(previous) => {
                pending.push((index, previous));
                results.push(Ok(()));
            }
            Err(error) if all_or_nothing => return vec![Err(error); group.len()],
            Err(error) => results.push(Err(error)),
        }
    }
    while !pending.is_empty() {
        let mut failed_at = None;
        let outcome = in_transaction(connection, transactions, |connection| {
            for (position, &(index, previous)) in pending.iter().enumerate() {
                if let Err(error) = write::write_commit(connection, &group[index], previous) {
                    failed_at = Some(position);
                    return Err(error);
                }
            }
            Ok(())
        });
        match (outcome, failed_at) {
            (Ok(()), _) => break,
            (Err(error), Some(position))
                if !all_or_nothing && !matches!(error, StoreError::Unavailable(_)) =>
            {
                let (index, _) = pending.remove(position);
                results[index] = Err(error);
            }
            (Err(error), _) => {
                for (index, _) in pending {
                    results[index] = Err(error.clone());
                }
                if all_or_nothing {
                    return vec![Err(error); group.len()];
                }
                break;
            }
        }
    }
    results
}

/// Runs `work` in a `BEGIN IMMEDIATE` transaction and commits it; rolls back on failure.
fn in_transaction<T>(
    connection: &mut Connection,
    transactions: &AtomicU64,
    work: impl FnOnce(&Connection) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    let transaction = connection
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(map_rusqlite_error)?;
    // Dropping the transaction on failure rolls it back.
    let value = work(&transaction)?;
    transaction.commit().map_err(map_rusqlite_error)?;
    transactions.fetch_add(1, Ordering::Relaxed);
    Ok(value)
}
