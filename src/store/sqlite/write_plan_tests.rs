//! What SQLite does per row the writer thread writes: no temporary b-tree for a partial index
//! predicate (migration 0006). A constant `IN` list of more than two values is evaluated by
//! building one (`OpenEphemeral`) each time a statement runs; before 0006 every execution cost
//! the writer about a hundred of them.

use super::super::StoreOptions;
use super::SqliteStore;
use super::write::{INSERT_EVENT, INSERT_EXECUTION, UPDATE_EXECUTION, UPSERT_STEP};

/// Counts the temporary b-trees a statement's program opens.
async fn temporary_btrees(store: &SqliteStore, sql: &str) -> usize {
    use sqlx::Row;
    let rows = sqlx::query(&format!("EXPLAIN {sql}"))
        .fetch_all(store.readers())
        .await
        .unwrap_or_else(|error| panic!("explain {sql}: {error}"));
    rows.iter()
        .filter(|row| {
            row.try_get::<String, _>(1)
                .is_ok_and(|op| op == "OpenEphemeral")
        })
        .count()
}

#[tokio::test]
async fn the_writers_statements_evaluate_index_predicates_without_temporary_btrees() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteStore::open(&dir.path().join("keel.db"), &StoreOptions::default())
        .await
        .expect("open");
    assert_eq!(temporary_btrees(&store, INSERT_EVENT).await, 0, "events");
    // At most the `status IN (...)` CHECK of 0001 is left (one on insert, one on update;
    // changing a CHECK needs a table rebuild). Before 0006: 3, 5 and 5.
    assert!(
        temporary_btrees(&store, INSERT_EXECUTION).await <= 1,
        "new execution"
    );
    assert!(
        temporary_btrees(&store, UPDATE_EXECUTION).await <= 1,
        "execution"
    );
    assert!(temporary_btrees(&store, UPSERT_STEP).await <= 2, "step");
}
