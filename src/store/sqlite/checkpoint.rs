//! The WAL checkpointer: a thread with a connection of its own that copies committed WAL frames
//! back into the database file (`PRAGMA wal_checkpoint(PASSIVE)`) while the writer thread goes
//! on committing. Without it the writer's own automatic checkpoint ran inside a commit every
//! 1000 frames — writing those pages to the database file and `fsync`ing it — and every commit
//! queued behind it waited. A checkpoint never changes what is durable: a commit is durable once
//! its WAL frames are synced (`synchronous=FULL`), before any checkpoint copies them.
//!
//! The writer keeps an automatic checkpoint at [`WRITER_AUTOCHECKPOINT`] frames as a safety
//! net for when the background one falls behind (a reader pinning old frames); the WAL then
//! stops growing there as before. The checkpointer wakes every [`INTERVAL`] and runs only when
//! the writer committed something since its last run. It is stopped (and its connection
//! closed) before the writer's connection, so that the writer's stays the last one and closing
//! it checkpoints and removes the WAL as before.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use keel_actors::error::StoreError;

use super::write::map_rusqlite_error;

/// How often the checkpointer looks for committed frames to copy.
pub(super) const INTERVAL: Duration = Duration::from_millis(200);

/// WAL frames at which the writer checkpoints by itself (SQLite's default is 1000).
pub(super) const WRITER_AUTOCHECKPOINT: i64 = 10_000;

/// The background checkpointer; dropping it stops the thread and closes its connection.
#[derive(Debug)]
pub(super) struct Checkpointer {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    /// Checkpoints that copied every frame of the WAL, for tests.
    #[cfg_attr(not(test), allow(dead_code))]
    complete: Arc<AtomicU64>,
}

impl Checkpointer {
    /// Opens a connection to the (existing, WAL-mode) database at `path` and starts the thread;
    /// it checkpoints whenever `transactions` (the writer's count of commits) has moved.
    pub fn start(path: &Path, transactions: Arc<AtomicU64>) -> Result<Self, StoreError> {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let connection = Connection::open_with_flags(path, flags).map_err(|error| {
            StoreError::Unavailable(format!(
                "opening sqlite database {} for checkpoints: {}",
                path.display(),
                map_rusqlite_error(error)
            ))
        })?;
        let (stop, stopped) = mpsc::channel();
        let complete = Arc::new(AtomicU64::new(0));
        let counter = complete.clone();
        let thread = std::thread::Builder::new()
            .name("keel-sqlite-checkpoint".to_owned())
            .spawn(move || run(&connection, &stopped, &transactions, &counter))
            .map_err(|error| {
                StoreError::Unavailable(format!("starting the sqlite checkpoint thread: {error}"))
            })?;
        Ok(Self {
            stop: Some(stop),
            thread: Some(thread),
            complete,
        })
    }

    /// Returns how many checkpoints copied the whole WAL.
    #[cfg(test)]
    pub fn complete(&self) -> u64 {
        self.complete.load(Ordering::Relaxed)
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        // Dropping the sender wakes the thread at once; it closes its connection and ends.
        self.stop.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Checkpoints every `INTERVAL` in which the writer committed, until told to stop.
fn run(
    connection: &Connection,
    stopped: &mpsc::Receiver<()>,
    transactions: &AtomicU64,
    complete: &AtomicU64,
) {
    let mut seen = transactions.load(Ordering::Relaxed);
    while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(INTERVAL) {
        let now = transactions.load(Ordering::Relaxed);
        if now == seen {
            continue;
        }
        seen = now;
        // PASSIVE never waits for readers or the writer: it copies what it can. The row is
        // (busy, frames in the WAL, frames copied).
        let result = connection.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
            Ok((row.get::<_, i64>(1)?, row.get::<_, i64>(2)?))
        });
        match result {
            Ok((frames, copied)) if frames >= 0 && frames == copied => {
                complete.fetch_add(1, Ordering::Relaxed);
            }
            Ok(_) => {}
            Err(error) => {
                tracing::debug!(error = %map_rusqlite_error(error), "background WAL checkpoint failed");
            }
        }
    }
}
