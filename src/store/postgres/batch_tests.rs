//! What a PostgreSQL commit group writes. A group is one transaction: every row it writes
//! carries the same `xmin` (the id of the transaction that wrote it). And it writes no orphans:
//! PostgreSQL has no foreign keys on `events`, `steps` and `execution_labels` (migration 0006:
//! their per-row trigger queries were 15–23 % of the server's CPU under the K=5 job). What they
//! guaranteed is kept by the writer: children are written only with their execution's row, in
//! the same statement, and retention deletes them with it. Skips (and passes) without
//! `KEEL_TEST_POSTGRES_URL`.

use std::sync::Arc;

use keel_actors::status::ExecutionStatus;
use keel_actors::store::{Commit, ExecutionRow, Store};

use super::super::StoreOptions;
use super::super::conformance::{MANY, at, creations, finish, new_execution, resume, with_step};
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

/// Children whose execution row does not exist, per table.
async fn orphans(store: &PostgresStore) -> Vec<(String, i64)> {
    let mut found = Vec::new();
    for (table, column) in [
        ("events", "execution_id"),
        ("steps", "execution_id"),
        ("execution_labels", "execution_id"),
    ] {
        let count: i64 = sqlx::query_scalar(&format!(
            "SELECT COUNT(*) FROM {table} AS c \
             WHERE NOT EXISTS (SELECT 1 FROM executions AS x WHERE x.id = c.{column})"
        ))
        .fetch_one(store.readers())
        .await
        .expect("orphan count");
        found.push((table.to_owned(), count));
    }
    found
}

fn no_orphans() -> Vec<(String, i64)> {
    ["events", "steps", "execution_labels"]
        .into_iter()
        .map(|table| (table.to_owned(), 0))
        .collect()
}

#[tokio::test]
async fn the_schema_has_no_foreign_keys_and_the_writer_leaves_no_orphans() {
    let Some(db) = test_db::fresh().await else {
        return;
    };
    let store = PostgresStore::open(&db.url, &StoreOptions::default())
        .await
        .expect("open");
    let foreign_keys: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM pg_constraint WHERE contype = 'f'")
            .fetch_one(store.readers())
            .await
            .expect("constraints");
    assert_eq!(foreign_keys, 0, "migration 0006 dropped them");

    let kept = new_execution("kept", "agent-a", &[("team", "x")], at(1));
    let kept_row = kept.execution.clone();
    let results = store.commit_group(vec![kept]).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");

    // In one group: a commit that follows `kept`, and commits with labels, events and steps
    // for executions whose rows are never written — one never created, one whose stored
    // sequence the commit does not follow, one created twice.
    let never_created = with_step(
        &new_execution("ghost", "agent-a", &[("team", "y")], at(1)).execution,
        "ghost-step",
        2,
    );
    let stale = with_step(&kept_row, "stale-step", 3);
    let twice = new_execution("kept", "agent-a", &[("team", "z")], at(4));
    let follows = with_step(&kept_row, "kept-step", 2);
    let results = store
        .commit_group(vec![follows.clone(), never_created, stale, twice])
        .await;
    assert!(results[0].is_ok(), "{results:?}");
    assert!(results[1..].iter().all(Result::is_err), "{results:?}");
    assert_eq!(orphans(&store).await, no_orphans());
    let labels: Vec<String> =
        sqlx::query_scalar("SELECT value FROM execution_labels ORDER BY value")
            .fetch_all(store.readers())
            .await
            .expect("labels");
    assert_eq!(labels, ["x"], "only the first creation's labels");
    let steps: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM steps")
        .fetch_one(store.readers())
        .await
        .expect("steps");
    assert_eq!(steps, 1, "only the written commit's step");

    // Retention deletes an execution with all of its children.
    let done = finish(&follows.execution, at(5), ExecutionStatus::Completed);
    let results = store.commit_group(vec![done]).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(
        store
            .delete_terminal_before(at(6), 10)
            .await
            .expect("delete"),
        1
    );
    assert_eq!(orphans(&store).await, no_orphans());
    for table in ["executions", "events", "steps", "execution_labels"] {
        let rows: i64 = sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {table}"))
            .fetch_one(store.readers())
            .await
            .expect("count");
        assert_eq!(rows, 0, "{table} emptied");
    }
}
