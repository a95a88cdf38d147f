//! The one-kernel-per-file lock of the SQLite store: a second open of a file in use is refused
//! with a clear message, and the lock is free again once the first store is closed or dropped.

use std::sync::Arc;

use keel_actors::error::StoreError;
use keel_actors::store::Store;

use super::{ANOTHER_KERNEL, SqliteStore, StoreOptions, open};

/// Returns the message of an `Unavailable` open, failing on anything else.
async fn refusal(url: &str) -> String {
    match open(url, &StoreOptions::default()).await {
        Err(StoreError::Unavailable(message)) => message,
        Err(other) => panic!("wrong class {other:?}"),
        Ok(_) => panic!("opened a database another kernel holds"),
    }
}

#[tokio::test]
async fn a_second_kernel_on_the_same_file_is_refused_until_the_first_closes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("keel.db");
    let url = format!("sqlite://{}", path.display());
    let first = SqliteStore::open(&path, &StoreOptions::default())
        .await
        .expect("open");
    assert!(dir.path().join("keel.db.lock").is_file());

    let message = refusal(&url).await;
    assert!(message.starts_with(ANOTHER_KERNEL), "{message}");
    assert!(message.contains("keel.db.lock"), "{message}");
    let clone = first.clone();
    drop(first);
    assert!(
        refusal(&url).await.starts_with(ANOTHER_KERNEL),
        "a clone keeps the lock"
    );
    clone.ping().await.expect("the first kernel is unaffected");

    clone.close().await;
    let second = open(&url, &StoreOptions::default())
        .await
        .unwrap_or_else(|error| panic!("open after close: {error}"));
    second.ping().await.expect("ping");
}

#[tokio::test]
async fn dropping_the_store_releases_the_lock() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite://{}", dir.path().join("keel.db").display());
    let first: Arc<dyn Store> = open(&url, &StoreOptions::default())
        .await
        .unwrap_or_else(|error| panic!("open: {error}"));
    drop(first);
    let second = open(&url, &StoreOptions::default())
        .await
        .unwrap_or_else(|error| panic!("open after drop: {error}"));
    second.ping().await.expect("ping");
}
