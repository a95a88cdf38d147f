//! The writing connection, shared by the writer thread and the committers.
//!
//! Every commit used to cross to the writer thread and back: the thread, asleep in its channel,
//! was woken by the commit, and the committing task was woken by the thread's answer. On a
//! lightly loaded kernel (one agent, the T3 latency target) those two wake-ups cost more than
//! the transaction's own statements: keeping the thread spinning instead of asleep took an
//! execution's p50 down 11 % (docs/benchmarks.md). So when nothing is queued for the thread and
//! the connection is free, the committer runs its group's transaction itself, on its own thread,
//! under the same lock the thread takes for each request; otherwise it queues the group as
//! before, and the thread folds everything waiting into one transaction. Either way the commit
//! is answered once `COMMIT` has returned, with `synchronous=FULL`: durability is unchanged.
//!
//! A committer that finds the thread busy never waits for the lock, so under load commits queue
//! and are folded as before; an inline transaction holds a tokio worker for its statements and
//! one `fsync`, about what a request's own work takes.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError};

use rusqlite::Connection;

use keel_actors::error::StoreError;

use super::positions::EventPositions;
use super::ready::ReadyCommit;
use super::write::{commit_group, in_transaction};

/// What the thread and inline committers write with: the connection, the event positions it
/// hands out and the count of its transactions.
pub(super) struct Writer {
    pub connection: Connection,
    pub positions: EventPositions,
    pub transactions: Arc<AtomicU64>,
}

impl Writer {
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

/// The writer (`None` once closed) and how many requests are queued for the thread.
pub(super) struct Shared {
    writer: Mutex<Option<Writer>>,
    queued: AtomicUsize,
    /// Groups committed by their callers (tests).
    #[cfg(test)]
    inline: AtomicUsize,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Shared")
            .field("queued", &self.queued)
            .finish_non_exhaustive()
    }
}

impl Shared {
    pub fn new(writer: Writer) -> Self {
        Self {
            writer: Mutex::new(Some(writer)),
            queued: AtomicUsize::new(0),
            #[cfg(test)]
            inline: AtomicUsize::new(0),
        }
    }

    /// Counts a request about to be sent to the thread.
    pub fn queued(&self) {
        self.queued.fetch_add(1, Ordering::SeqCst);
    }

    /// Counts a request the thread has taken from its channel.
    pub fn taken(&self) {
        self.queued.fetch_sub(1, Ordering::SeqCst);
    }

    /// Locks the writer (a panic while it was held leaves the connection usable: a transaction
    /// that did not commit is rolled back when its handle is dropped).
    pub fn lock(&self) -> MutexGuard<'_, Option<Writer>> {
        self.writer.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Commits `group` here when nothing is queued for the thread and the writer is free;
    /// gives the group back otherwise (or when the store is closed: the thread answers that).
    pub fn try_commit(
        &self,
        group: Vec<ReadyCommit>,
        all_or_nothing: bool,
        caller: &tracing::Span,
    ) -> Result<Vec<Result<(), StoreError>>, Vec<ReadyCommit>> {
        if self.queued.load(Ordering::SeqCst) != 0 {
            return Err(group);
        }
        let mut guard = match self.writer.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return Err(group),
        };
        let Some(writer) = guard.as_mut() else {
            return Err(group);
        };
        #[cfg(test)]
        self.inline.fetch_add(1, Ordering::SeqCst);
        let span = super::commit_span::store_commit_span(&group, std::slice::from_ref(caller));
        Ok(span.in_scope(|| writer.commit_group(&group, all_or_nothing)))
    }

    /// How many requests are queued for the thread, and how many groups their callers
    /// committed (tests).
    #[cfg(test)]
    pub fn counts(&self) -> (usize, usize) {
        (
            self.queued.load(Ordering::SeqCst),
            self.inline.load(Ordering::SeqCst),
        )
    }
}
