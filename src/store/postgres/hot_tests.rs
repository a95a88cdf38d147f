//! Migration 0006: the commits that leave an execution's status alone change no indexed column
//! of `executions`, so PostgreSQL can update the row in place (HOT) instead of adding an entry
//! to each of its indexes. Skips (and passes) without `KEEL_TEST_POSTGRES_URL`.

use keel_actors::status::ExecutionStatus;
use keel_actors::store::Store;
use keel_actors::time::{self, Timestamp};

use super::super::StoreOptions;
use super::PostgresStore;
use super::test_db;
use crate::store::conformance::{advance, at, create, finish};

/// The columns a commit that keeps the status writes.
const REWRITTEN: [&str; 5] = [
    "updated_at",
    "output",
    "session_id",
    "consumer_id",
    "last_sequence",
];

#[tokio::test]
async fn no_index_of_executions_covers_a_column_a_same_status_commit_changes() {
    let Some(db) = test_db::fresh().await else {
        return;
    };
    let store = PostgresStore::open(&db.url, &StoreOptions::default())
        .await
        .expect("open");
    let definitions: Vec<String> = sqlx::query_scalar(
        "SELECT pg_get_indexdef(indexrelid) FROM pg_index \
         WHERE indrelid = 'executions'::regclass",
    )
    .fetch_all(store.readers())
    .await
    .expect("indexes");
    assert!(definitions.len() >= 7, "{definitions:?}");
    for definition in &definitions {
        for column in REWRITTEN {
            assert!(!definition.contains(column), "{definition} covers {column}");
        }
    }
}

#[tokio::test]
async fn finished_at_is_the_time_an_execution_became_terminal() {
    let Some(db) = test_db::fresh().await else {
        return;
    };
    let postgres = std::sync::Arc::new(
        PostgresStore::open(&db.url, &StoreOptions::default())
            .await
            .expect("open"),
    );
    let store: std::sync::Arc<dyn Store> = postgres.clone();
    let row = create(&store, "hot-a", "agent-a", &[], at(1)).await;
    let running = advance(&row, at(2), ExecutionStatus::Running, Vec::new());
    store
        .commit(std::slice::from_ref(&running))
        .await
        .expect("running");
    // (is it NULL, is it the given time)
    let finished_at = |when: Timestamp| {
        let readers = postgres.readers().clone();
        async move {
            sqlx::query_as::<_, (bool, Option<bool>)>(
                "SELECT finished_at IS NULL, finished_at = $1::timestamptz FROM executions \
                 WHERE id = 'hot-a'",
            )
            .bind(time::format(&when))
            .fetch_one(&readers)
            .await
            .expect("row")
        }
    };
    assert_eq!(finished_at(at(2)).await, (true, None));
    let done = finish(&running.execution, at(3), ExecutionStatus::Completed);
    store.commit(&[done]).await.expect("finished");
    assert_eq!(finished_at(at(3)).await, (false, Some(true)));
}
