//! A PostgreSQL commit group is one transaction: every row it writes carries the same `xmin`
//! (the id of the transaction that wrote it).

use std::sync::Arc;

use keel_actors::store::{Commit, ExecutionRow, Store};

use super::super::StoreOptions;
use super::super::conformance::{MANY, creations, resume};
use super::PostgresStore;
use super::test_db;

/// Counts the distinct transactions that wrote the rows `sql` selects (`xmin` of each).
async fn writers(store: &PostgresStore, sql: &str) -> i64 {
    sqlx::query_scalar(&format!(
        "SELECT COUNT(DISTINCT xmin::text) FROM ({sql}) AS rows"
    ))
    .fetch_one(store.readers())
    .await
    .expect("xmin count")
}

#[tokio::test]
async fn a_group_of_many_executions_commits_in_one_transaction() {
    let Some(db) = test_db::fresh().await else {
        return;
    };
    let store = PostgresStore::open(&db.url, &StoreOptions::default())
        .await
        .expect("open");
    let created = creations("tx", MANY);
    let rows: Vec<ExecutionRow> = created.iter().map(|c| c.execution.clone()).collect();
    let results = store.commit_group(created).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let everything = "SELECT xmin FROM executions UNION ALL SELECT xmin FROM events \
                      UNION ALL SELECT xmin FROM execution_labels";
    assert_eq!(writers(&store, everything).await, 1);

    let resumed: Vec<Commit> = rows.iter().map(|row| resume(row, 500)).collect();
    let results = store.commit_group(resumed).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let second = "SELECT xmin FROM executions UNION ALL \
                  SELECT xmin FROM events WHERE sequence = 2";
    assert_eq!(writers(&store, second).await, 1);
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM events WHERE sequence = 2")
        .fetch_one(store.readers())
        .await
        .expect("count");
    assert_eq!(rows, MANY as i64);
    let store: Arc<dyn Store> = Arc::new(store);
    assert!(store.ping().await.is_ok());
}
