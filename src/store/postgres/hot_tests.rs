//! Heap-only updates of `executions` (migration 0007). An execution on a step flips between
//! `running` and `blocked` on nearly every commit; no index of `executions` reads `status` or
//! `updated_at` any more, so such an update stays on the row's page and writes no index entry
//! (a HOT update), while a change of phase (here: the execution finishes) still updates the
//! indexes. Counted with `pg_stat_xact_user_tables`, inside the writing transaction. Skips (and
//! passes) without `KEEL_TEST_POSTGRES_URL`.

use sqlx::{Connection, PgConnection};

use keel_actors::status::ExecutionStatus;
use keel_actors::store::{Commit, ExecutionRow, ListFilter, Store};

use super::super::StoreOptions;
use super::super::conformance::{at, finish, new_execution, resumed_to};
use super::write::{check, commit_all};
use super::{PostgresStore, test_db};

/// Updates and heap-only updates of `executions` in the current transaction.
async fn updates(connection: &mut PgConnection) -> (i64, i64) {
    sqlx::query_as(
        "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables \
         WHERE relname = 'executions'",
    )
    .fetch_one(connection)
    .await
    .expect("statistics")
}

/// Writes `commit` as the store does, inside the caller's transaction (a savepoint).
async fn write(connection: &mut PgConnection, commit: Commit) -> ExecutionRow {
    let row = commit.execution.clone();
    let group = vec![commit];
    let pending = check(&group)
        .into_iter()
        .enumerate()
        .map(|(index, previous)| (index, previous.expect("a valid commit")))
        .collect();
    commit_all(connection, &group, pending, None)
        .await
        .expect("written");
    row
}

#[tokio::test]
async fn running_and_blocked_flips_update_no_index_and_finishing_does() {
    let Some(db) = test_db::fresh().await else {
        return;
    };
    let store = PostgresStore::open(&db.url, &StoreOptions::default())
        .await
        .expect("open");
    let created = new_execution("hot", "agent-a", &[("team", "x")], at(1));
    let row = created.execution.clone();
    let started = resumed_to(&row, ExecutionStatus::Running, 2);
    let row = started.execution.clone();
    for commit in [created, started] {
        let results = store.commit_group(vec![commit]).await;
        assert!(results.iter().all(Result::is_ok), "{results:?}");
    }

    let mut connection = PgConnection::connect(&db.url).await.expect("connect");
    let mut transaction = connection.begin().await.expect("begin");
    let row = write(
        &mut transaction,
        resumed_to(&row, ExecutionStatus::Blocked, 3),
    )
    .await;
    let row = write(
        &mut transaction,
        resumed_to(&row, ExecutionStatus::Running, 4),
    )
    .await;
    let row = write(
        &mut transaction,
        resumed_to(&row, ExecutionStatus::Blocked, 5),
    )
    .await;
    assert_eq!(updates(&mut transaction).await, (3, 3), "the flips are HOT");
    let row = write(
        &mut transaction,
        resumed_to(&row, ExecutionStatus::Running, 6),
    )
    .await;
    write(
        &mut transaction,
        finish(&row, at(7), ExecutionStatus::Completed),
    )
    .await;
    assert_eq!(
        updates(&mut transaction).await,
        (5, 4),
        "finishing changes the phase, which the indexes read"
    );
    transaction.commit().await.expect("commit");

    // What the indexes answer after those updates.
    for (status, expected) in [
        (ExecutionStatus::Completed, 1),
        (ExecutionStatus::Running, 0),
        (ExecutionStatus::Blocked, 0),
    ] {
        let filter = ListFilter {
            status: Some(status),
            limit: 10,
            ..ListFilter::default()
        };
        let listed = store.list_executions(&filter).await.expect("list");
        assert_eq!(listed.len(), expected, "{status}");
    }
    assert!(
        store
            .non_terminal_executions()
            .await
            .expect("read")
            .is_empty()
    );
    assert_eq!(
        store
            .delete_terminal_before(at(8), 10)
            .await
            .expect("delete"),
        1
    );
}
