//! PostgreSQL has no foreign keys on `events`, `steps` and `execution_labels` (migration 0006:
//! their per-row trigger queries were 15–23 % of the server's CPU under the K=5 job). What they
//! guaranteed is kept by the writer: children are written only with their execution's row, in
//! the same statement, and retention deletes them with it. These tests look for orphans after
//! the cases that could make one. Skips (and passes) without `KEEL_TEST_POSTGRES_URL`.

use keel_actors::events::{EventBody, NewEvent};
use keel_actors::ids::StepId;
use keel_actors::status::{ExecutionStatus, StepStatus};
use keel_actors::store::{Commit, ExecutionRow, StepRow, Store};

use super::super::StoreOptions;
use super::super::conformance::{advance, at, finish, new_execution};
use super::{PostgresStore, test_db};

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

/// A commit that starts the local step `step` of `row`.
fn with_step(row: &ExecutionRow, step: &str, micros: i64) -> Commit {
    let step_id = StepId::new(step);
    let mut commit = advance(
        row,
        at(micros),
        ExecutionStatus::Blocked,
        vec![NewEvent::execution(EventBody::ExecutionResumed {
            reason: "r".into(),
        })],
    );
    commit.steps = vec![StepRow {
        id: step_id,
        execution_id: row.id.clone(),
        tool_id: "web".into(),
        status: StepStatus::Running,
        attempt: 1,
        max_attempts: 1,
        remote: false,
        job_id: None,
        runner_id: None,
        deadline: None,
        updated_at: at(micros),
    }];
    commit
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
