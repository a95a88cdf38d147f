//! The SQLite writer thread commits a whole group in one transaction, counted by the thread.

use std::sync::Arc;

use keel_actors::store::{Commit, ExecutionRow, Store};

use super::super::StoreOptions;
use super::super::conformance::{MANY, creations, resume};
use super::SqliteStore;

#[tokio::test]
async fn a_group_of_many_executions_commits_in_one_transaction() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteStore::open(&dir.path().join("keel.db"), &StoreOptions::default())
        .await
        .expect("open");
    let shared: Arc<dyn Store> = Arc::new(store.clone());

    let created = creations("tx", MANY);
    let rows: Vec<ExecutionRow> = created.iter().map(|c| c.execution.clone()).collect();
    let before = store.transactions();
    let results = shared.commit_group(created).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(store.transactions() - before, 1, "one transaction");

    let resumed: Vec<Commit> = rows.iter().map(|row| resume(row, 500)).collect();
    let before = store.transactions();
    shared.commit(&resumed).await.expect("batch commits");
    assert_eq!(store.transactions() - before, 1, "one transaction");
    let events: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM events")
        .fetch_one(store.readers())
        .await
        .expect("count");
    assert_eq!(events, 2 * MANY as i64);
}

#[tokio::test]
async fn a_failing_commit_is_left_out_and_the_rest_commit_in_one_transaction() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteStore::open(&dir.path().join("keel.db"), &StoreOptions::default())
        .await
        .expect("open");
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let mut group = creations("retry", MANY);
    // A second creation of the same execution: its sequence 1 is taken by the first.
    group.push(group[0].clone());

    let before = store.transactions();
    let results = shared.commit_group(group).await;
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), MANY);
    assert!(results[MANY].is_err(), "{:?}", results[MANY]);
    assert_eq!(
        store.transactions() - before,
        1,
        "the rest in one transaction"
    );
}
