//! The SQLite writer thread commits a whole group in one transaction, counted by the thread,
//! folds the groups waiting for it into one, and checkpoints the WAL beside it.

use std::sync::Arc;

use keel_actors::error::StoreError;
use keel_actors::ids::ExecutionId;
use keel_actors::status::ExecutionStatus;
use keel_actors::store::{Commit, ExecutionRow, Store};

use super::super::StoreOptions;
use super::super::conformance::{
    MANY, at, creations, finish, new_execution, resume, resumed_to, with_step,
};
use super::SqliteStore;

/// A store on a new database in a temporary directory (kept as long as the first value), and
/// the same store as the kernel holds it.
async fn fresh() -> (tempfile::TempDir, SqliteStore, Arc<dyn Store>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteStore::open(&dir.path().join("keel.db"), &StoreOptions::default())
        .await
        .expect("open");
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    (dir, store, shared)
}

#[tokio::test]
async fn a_group_of_many_executions_commits_in_one_transaction() {
    let (_dir, store, shared) = fresh().await;

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
    let (_dir, store, shared) = fresh().await;
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

/// Two new executions created with one idempotency key: both rows are new, so only the unique
/// index over creation keys refuses the second, while the events are inserted. The multi-row
/// insert cannot say whose event that was (`event_rows.rs`); the group is written again with
/// each commit's events inserted after it, the second creation fails alone, and the positions the failed tries
/// handed out are taken back: the stored ones follow the group's order without a gap.
#[tokio::test]
async fn a_creation_key_repeated_in_one_group_fails_the_later_commit_alone() {
    let (_dir, store, shared) = fresh().await;
    let mut group = creations("key", MANY);
    for index in [3, 150] {
        group[index].events[0].idempotency_key = Some("one-key".to_owned());
    }
    let ids: Vec<String> = group
        .iter()
        .map(|commit| commit.execution.id.as_str().to_owned())
        .collect();

    let before = store.transactions();
    let results = shared.commit_group(group).await;
    assert!(
        matches!(results[150], Err(StoreError::Conflict(_))),
        "{:?}",
        results[150]
    );
    for (index, result) in results.iter().enumerate().filter(|(i, _)| *i != 150) {
        assert!(result.is_ok(), "{index}: {result:?}");
    }
    assert_eq!(
        store.transactions() - before,
        1,
        "one transaction committed"
    );

    let stored: Vec<(i64, String)> =
        sqlx::query_as("SELECT position, execution_id FROM events ORDER BY position")
            .fetch_all(store.readers())
            .await
            .expect("events");
    let expected: Vec<(i64, String)> = ids
        .into_iter()
        .enumerate()
        .filter(|(index, _)| *index != 150)
        .enumerate()
        .map(|(position, (_, id))| (position as i64 + 1, id))
        .collect();
    assert_eq!(stored, expected);
    let refused = shared
        .execution(&ExecutionId::new("key-150"))
        .await
        .expect("read");
    assert!(
        refused.is_none(),
        "its row went with its event: {refused:?}"
    );
}

/// In a group whose events are inserted with multi-row statements (`event_rows.rs`),
/// an update whose execution moves on earlier in the same group fails alone, one whose status
/// hint is wrong is written by the full update, and everything else commits in one transaction.
#[tokio::test]
async fn an_update_that_does_not_apply_fails_alone_and_a_wrong_status_hint_is_overruled() {
    let (_dir, store, shared) = fresh().await;
    let created = creations("update", MANY);
    let rows: Vec<ExecutionRow> = created.iter().map(|c| c.execution.clone()).collect();
    shared.commit(&created).await.expect("created");
    // Execution 9 is running; the group's commit for it claims it was pending.
    let running = resumed_to(&rows[9], ExecutionStatus::Running, 100);
    shared
        .commit(std::slice::from_ref(&running))
        .await
        .expect("running");
    let mut group: Vec<Commit> = rows
        .iter()
        .map(|row| resumed_to(row, ExecutionStatus::Pending, 200))
        .collect();
    group[9] = resumed_to(&running.execution, ExecutionStatus::Pending, 200);
    group[9].previous_status = Some(ExecutionStatus::Pending);
    // The same update twice: the second follows a sequence the first takes.
    group.push(group[5].clone());

    let before = store.transactions();
    let results = shared.commit_group(group).await;
    assert!(
        matches!(results[MANY], Err(StoreError::Conflict(_))),
        "{:?}",
        results[MANY]
    );
    for (index, result) in results.iter().enumerate().take(MANY) {
        assert!(result.is_ok(), "{index}: {result:?}");
    }
    assert_eq!(
        store.transactions() - before,
        1,
        "one transaction committed"
    );
    for (index, status, last_sequence) in [
        (9, ExecutionStatus::Pending, 3),
        (5, ExecutionStatus::Pending, 2),
    ] {
        let row = shared
            .execution(&rows[index].id)
            .await
            .expect("read")
            .expect("row");
        assert_eq!((row.status, row.last_sequence), (status, last_sequence));
    }
    let events: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM events")
        .fetch_one(store.readers())
        .await
        .expect("count");
    assert_eq!(events, 2 * MANY as i64 + 1);
}

#[tokio::test]
async fn groups_waiting_for_the_writer_are_folded_into_one_transaction_and_answered_apart() {
    let (_dir, store, shared) = fresh().await;
    assert!(
        shared.folds_groups(),
        "commits are handed over without the StoreWriter"
    );
    let created = creations("fold", 3);
    let first = created[0].execution.clone();

    // Three groups queue behind a busy writer: a new creation, a creation of an execution that
    // another group of the same fold creates too (its sequence 1 is taken: it fails alone),
    // and two creations.
    let metrics = Arc::new(keel_actors::metrics::Metrics::new());
    shared.observe_transactions(metrics.clone());
    let release = store.hold_writer().expect("hold");
    let before = store.transactions();
    let mut waiting = Vec::new();
    for group in [
        vec![created[0].clone()],
        vec![created[0].clone()],
        vec![created[1].clone(), created[2].clone()],
    ] {
        let mut answer = shared.commit_group(group);
        // The first poll hands the group to the writer's channel, where it waits.
        assert!(futures::poll!(answer.as_mut()).is_pending());
        waiting.push(answer);
    }
    release.send(()).expect("release");
    let mut answers = Vec::new();
    for answer in waiting {
        answers.push(
            tokio::time::timeout(std::time::Duration::from_secs(10), answer)
                .await
                .expect("answered in time"),
        );
    }
    assert_eq!(answers[0].len(), 1);
    assert!(answers[0][0].is_ok(), "{:?}", answers[0]);
    assert_eq!(answers[1].len(), 1);
    assert!(
        answers[1][0].is_err(),
        "the repeated creation fails alone: {:?}",
        answers[1]
    );
    assert_eq!(answers[2].len(), 2);
    assert!(answers[2].iter().all(Result::is_ok), "{:?}", answers[2]);
    assert_eq!(
        store.transactions() - before,
        1,
        "one transaction for the three groups"
    );
    // The metrics count that one transaction and the four commits folded into it.
    let exposition = metrics.encode();
    for line in [
        "keel_store_commit_batch_size_count 1",
        "keel_store_commit_batch_size_sum 4.0",
    ] {
        assert!(exposition.contains(line), "{line} in {exposition}");
    }
    let stored = shared
        .execution(&first.id)
        .await
        .expect("read")
        .expect("row");
    assert_eq!(stored.last_sequence, first.last_sequence);
    let events: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM events")
        .fetch_one(store.readers())
        .await
        .expect("count");
    assert_eq!(events, 3, "one execution.created per execution");
}

#[tokio::test]
async fn the_wal_is_checkpointed_in_the_background_and_the_writer_only_falls_back() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteStore::open(&dir.path().join("keel.db"), &StoreOptions::default())
        .await
        .expect("open");
    assert_eq!(
        store
            .writer_pragma("wal_autocheckpoint")
            .await
            .expect("pragma"),
        super::checkpoint::WRITER_AUTOCHECKPOINT
    );
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let results = shared.commit_group(creations("wal", MANY)).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while store.checkpoints().await.expect("count") == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no background checkpoint copied the WAL within 10 s"
        );
        tokio::time::sleep(super::checkpoint::INTERVAL / 2).await;
    }
    // Closing still removes the WAL: the checkpointer's connection is gone before the writer's.
    store.close().await;
    assert!(
        !dir.path().join("keel.db-wal").exists(),
        "WAL removed at close"
    );
}

/// The bundled SQLite is built with `.cargo/config.toml`'s flags: no allocation statistics (a
/// global mutex around every allocation) and 300 lookaside slots per connection, so that the
/// writer's statements allocate their cursors and bound values from the slots its cached
/// statements leave free instead of from `malloc` (docs/benchmarks.md).
#[tokio::test]
async fn sqlite_is_built_without_memory_statistics_and_with_a_larger_lookaside() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteStore::open(&dir.path().join("keel.db"), &StoreOptions::default())
        .await
        .expect("open");
    let options: Vec<String> =
        sqlx::query_scalar("SELECT compile_options FROM pragma_compile_options")
            .fetch_all(store.readers())
            .await
            .expect("compile options");
    for expected in ["DEFAULT_MEMSTATUS=0", "DEFAULT_LOOKASIDE=1200,300"] {
        assert!(
            options.iter().any(|option| option == expected),
            "{expected} in {options:?}"
        );
    }
}

/// Rows `PRAGMA foreign_key_check` reports: children whose execution row does not exist.
async fn dangling(store: &SqliteStore) -> Vec<(String, i64)> {
    sqlx::query_as("SELECT \"table\", rowid FROM pragma_foreign_key_check")
        .fetch_all(store.readers())
        .await
        .expect("foreign key check")
}

/// The writer enforces no foreign keys (writer.rs): it keeps them itself. Commits whose
/// execution row is not written (never created, a stale sequence, a second creation) leave no
/// label, event or step behind, and retention deletes an execution with all its children.
#[tokio::test]
async fn the_writer_leaves_no_orphans_without_enforcing_foreign_keys() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteStore::open(&dir.path().join("keel.db"), &StoreOptions::default())
        .await
        .expect("open");
    assert_eq!(
        store.writer_pragma("foreign_keys").await.expect("pragma"),
        0
    );
    let kept = new_execution("kept", "agent-a", &[("team", "x")], at(1));
    let kept_row = kept.execution.clone();
    let results = store.commit_group(vec![kept]).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");

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
    assert_eq!(dangling(&store).await, vec![]);
    let labels: Vec<String> = sqlx::query_scalar("SELECT value FROM execution_labels")
        .fetch_all(store.readers())
        .await
        .expect("labels");
    assert_eq!(labels, ["x"], "only the first creation's labels");
    let steps: Vec<String> = sqlx::query_scalar("SELECT id FROM steps")
        .fetch_all(store.readers())
        .await
        .expect("steps");
    assert_eq!(steps, ["kept-step"], "only the written commit's step");

    let done = finish(&follows.execution, at(5), ExecutionStatus::Completed);
    let results = store.commit_group(vec![done]).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let deleted = store
        .delete_terminal_before(at(6), 10)
        .await
        .expect("retention");
    assert_eq!(deleted, 1);
    assert_eq!(dangling(&store).await, vec![]);
    for table in ["executions", "events", "steps", "execution_labels"] {
        let rows: i64 = sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {table}"))
            .fetch_one(store.readers())
            .await
            .expect("count");
        assert_eq!(rows, 0, "{table} emptied");
    }
}

/// Reads an execution's `status`, `phase` and `finished_at` columns as stored.
async fn phase_columns(store: &SqliteStore, id: &str) -> (String, String, Option<String>) {
    sqlx::query_as("SELECT status, phase, finished_at FROM executions WHERE id = ?1")
        .bind(id)
        .fetch_one(store.readers())
        .await
        .expect("row")
}

/// The phase and `finished_at` (migration 0009) follow the status through every kind of update:
/// a flip between running and blocked leaves the phase as it was, a wrong status hint that
/// claims the phase is unchanged is overruled by the full update (without the phase in its
/// `WHERE`, the CHECK on `phase` would refuse it), and the terminal status sets `finished_at`.
#[tokio::test]
async fn the_phase_and_finish_time_follow_the_status_whatever_the_hint_says() {
    let (dir, store, shared) = fresh().await;
    let created = creations("phase", 2);
    let rows: Vec<ExecutionRow> = created.iter().map(|c| c.execution.clone()).collect();
    shared.commit(&created).await.expect("created");
    assert_eq!(
        phase_columns(&store, "phase-0").await,
        ("pending".into(), "pending".into(), None)
    );

    let running = resume(&rows[0], 100);
    shared
        .commit(std::slice::from_ref(&running))
        .await
        .expect("running");
    let blocked = with_step(&running.execution, "phase-step", 200);
    assert_eq!(blocked.previous_status, Some(ExecutionStatus::Running));
    shared
        .commit(std::slice::from_ref(&blocked))
        .await
        .expect("blocked");
    assert_eq!(
        phase_columns(&store, "phase-0").await,
        ("blocked".into(), "active".into(), None)
    );

    // Execution 1 is pending; this commit claims it was running.
    let mut misled = resumed_to(&rows[1], ExecutionStatus::Blocked, 300);
    misled.previous_status = Some(ExecutionStatus::Running);
    shared
        .commit(std::slice::from_ref(&misled))
        .await
        .expect("hint overruled");
    assert_eq!(
        phase_columns(&store, "phase-1").await,
        ("blocked".into(), "active".into(), None)
    );

    let done = resumed_to(&blocked.execution, ExecutionStatus::Completed, 400);
    shared
        .commit(std::slice::from_ref(&done))
        .await
        .expect("completed");
    let finished = keel_actors::time::format(&done.execution.updated_at);
    assert_eq!(
        phase_columns(&store, "phase-0").await,
        ("completed".into(), "completed".into(), Some(finished))
    );
    let non_terminal = shared.non_terminal_executions().await.expect("recovery");
    assert_eq!(non_terminal, vec![ExecutionId::new("phase-1")]);

    let raw = sqlx::SqlitePool::connect_with(
        sqlx::sqlite::SqliteConnectOptions::new().filename(dir.path().join("keel.db")),
    )
    .await
    .expect("raw pool");
    let contradiction =
        sqlx::query("UPDATE executions SET status = 'running' WHERE id = 'phase-0'")
            .execute(&raw)
            .await;
    assert!(
        contradiction.is_err(),
        "the CHECK ties the phase to the status"
    );
}
