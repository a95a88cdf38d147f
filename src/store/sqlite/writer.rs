//! The SQLite writer thread: one OS thread owning the store's only writing connection (a
//! rusqlite connection on the same SQLite library as sqlx). The async side sends it whole
//! groups of commits over a channel; it runs each group in one `BEGIN IMMEDIATE … COMMIT`
//! transaction with cached prepared statements and answers through a oneshot once `COMMIT`
//! has returned (with `synchronous=FULL`, once the WAL is on disk). A group costs one thread
//! hop there and one back, however many rows it writes.
//!
//! Retention deletes run here too, since only this connection writes. WAL checkpoints run
//! beside it, on the checkpoint thread (`checkpoint.rs`), which this thread starts and stops.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::mpsc;

use tokio::sync::oneshot;

use keel_actors::error::StoreError;
use keel_actors::metrics::Metrics;
use keel_actors::store::Commit;

use super::checkpoint::Checkpointer;
use super::connection::{Writer, WriterOptions};
use super::ready::ReadyCommit;

mod serve;
use serve::serve;

/// Most commits one transaction takes from groups waiting in the channel (see `fold_and_commit`).
const MAX_FOLDED: usize = 512;

/// Work for the writer thread.
enum Request {
    /// Commit a group; `all_or_nothing` fails the whole group on the first failing commit
    /// (`Store::commit`), otherwise a failing commit fails alone (`Store::commit_group`).
    Commit {
        group: Vec<ReadyCommit>,
        all_or_nothing: bool,
        reply: CommitReply,
        /// The caller's span when traces are exported (docs/tracing.md), else a disabled one.
        caller: tracing::Span,
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
    /// Upserts API keys (`Store::put_api_keys`).
    PutApiKeys {
        keys: Vec<keel_actors::store::StoredKey>,
        reply: oneshot::Sender<Result<(), StoreError>>,
    },
    /// Reads one integer pragma of the writer connection (tests check its settings).
    #[cfg(test)]
    Pragma {
        name: &'static str,
        reply: oneshot::Sender<Result<i64, StoreError>>,
    },
    /// Counts the background checkpoints that copied the whole WAL (tests).
    #[cfg(test)]
    Checkpoints { reply: oneshot::Sender<u64> },
    /// Keeps the thread busy until `release` is signalled or dropped (tests queue work behind it).
    #[cfg(test)]
    Hold { release: mpsc::Receiver<()> },
    /// From now on, observe each commit transaction's size in these metrics.
    Observe(Arc<Metrics>),
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
            .spawn(move || {
                let started = Writer::open(&path, &options, counter.clone()).and_then(|writer| {
                    let checkpointer = Checkpointer::start(&path, counter)?;
                    Ok((writer, checkpointer))
                });
                match started {
                    Ok((writer, checkpointer)) => {
                        let _ = opened.send(Ok(()));
                        serve(writer, checkpointer, &receiver);
                    }
                    Err(error) => {
                        let _ = opened.send(Err(error));
                    }
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

    /// Commits `group` in one transaction; see [`Request::Commit`]. The commits are checked
    /// and encoded here, on the caller's task, before they are queued (`ready.rs`).
    pub async fn commit(
        &self,
        group: Vec<Commit>,
        all_or_nothing: bool,
    ) -> Vec<Result<(), StoreError>> {
        let size = group.len();
        let group: Vec<ReadyCommit> = group.into_iter().map(ReadyCommit::new).collect();
        let (reply, answer) = oneshot::channel();
        // Checked at the callsite: a constant `false` when no exporter enables the target.
        let caller = if tracing::enabled!(target: keel_actors::trace::TARGET, tracing::Level::INFO)
        {
            tracing::Span::current()
        } else {
            tracing::Span::none()
        };
        let request = Request::Commit {
            group,
            all_or_nothing,
            reply,
            caller,
        };
        match self.ask(request, answer).await {
            // The commits come back to be dropped here, on the caller's task, and not on the
            // writer thread, which every other commit waits on.
            Ok((results, _spent)) => results,
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

    /// Upserts API keys in one transaction.
    pub async fn put_api_keys(
        &self,
        keys: Vec<keel_actors::store::StoredKey>,
    ) -> Result<(), StoreError> {
        let (reply, answer) = oneshot::channel();
        self.ask(Request::PutApiKeys { keys, reply }, answer)
            .await?
    }

    /// Reads an integer pragma of the writer connection.
    #[cfg(test)]
    pub async fn pragma(&self, name: &'static str) -> Result<i64, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.ask(Request::Pragma { name, reply }, answer).await?
    }

    /// Keeps the thread busy until the returned sender is used or dropped (at most 10 s).
    #[cfg(test)]
    pub fn hold(&self) -> Result<mpsc::Sender<()>, StoreError> {
        let (release, held) = mpsc::channel();
        self.requests
            .send(Request::Hold { release: held })
            .map_err(|_| stopped())?;
        Ok(release)
    }

    /// Returns how many background checkpoints copied the whole WAL.
    #[cfg(test)]
    pub async fn checkpoints(&self) -> Result<u64, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.ask(Request::Checkpoints { reply }, answer).await
    }

    /// Returns how many transactions the thread has committed.
    #[cfg(test)]
    pub fn transactions(&self) -> u64 {
        self.transactions.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Has the thread observe each commit transaction's size (the commits it folded) in
    /// `metrics` from its next request on; the kernel's last call wins.
    pub fn observe(&self, metrics: Arc<Metrics>) {
        // A closed thread has nothing left to observe.
        let _ = self.requests.send(Request::Observe(metrics));
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

/// Answer of a commit request: each commit's result, and the commits themselves, handed back
/// so that the caller's task drops them (dropping a commit's events and rows was 4 % of the
/// writer thread's instructions under T1).
type CommitReply = oneshot::Sender<(Vec<Result<(), StoreError>>, Vec<ReadyCommit>)>;
