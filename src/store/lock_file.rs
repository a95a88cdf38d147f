//! The one-kernel-per-file lock of SQLite databases: an exclusive advisory lock (`flock` on
//! Unix, `LockFileEx` on Windows) on `<file>.lock` next to the database, held by `SqliteStore`
//! for its lifetime. The OS releases it when the process dies, so a crashed kernel never
//! leaves a stale lock behind.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::Path;

use keel_actors::error::StoreError;

use super::ANOTHER_KERNEL;

/// Takes the exclusive lock on `<path>.lock` (created if missing, never deleted: deleting a
/// lock file races with the next kernel taking it) and returns the locked file.
pub(crate) fn lock_kernel_file(path: &Path) -> Result<File, StoreError> {
    let mut lock_path = path.as_os_str().to_owned();
    lock_path.push(".lock");
    let lock_path = Path::new(&lock_path);
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(lock_path)
        .map_err(|error| {
            StoreError::Unavailable(format!(
                "opening lock file {}: {error}",
                lock_path.display()
            ))
        })?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(TryLockError::WouldBlock) => Err(StoreError::Unavailable(format!(
            "{ANOTHER_KERNEL} (lock file {} is held); stop that kernel or point this one at \
             another database file",
            lock_path.display()
        ))),
        Err(TryLockError::Error(error)) => Err(StoreError::Unavailable(format!(
            "locking {}: {error}",
            lock_path.display()
        ))),
    }
}
