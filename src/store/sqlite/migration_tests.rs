//! Databases written at an older schema, opened by this binary: migration 0008 (events without
//! `AUTOINCREMENT` and without an index on `id`) and the positions the writer hands out after it.

use std::path::Path;

use sqlx::sqlite::{SqliteConnectOptions, SqlitePool};

use keel_actors::status::ExecutionStatus;
use keel_actors::store::Store as _;

use super::super::StoreOptions;
use super::super::conformance::{at, finish, new_execution};
use super::SqliteStore;

/// Creates a database at `path` with the migrations up to `version` applied and recorded as
/// sqlx records them, as a kernel of that schema would have left it.
pub(super) async fn database_at_schema(path: &Path, version: i64) -> SqlitePool {
    let options = SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true);
    let pool = SqlitePool::connect_with(options).await.expect("pool");
    sqlx::raw_sql(
        "CREATE TABLE _sqlx_migrations (version BIGINT PRIMARY KEY, description TEXT NOT NULL, \
         installed_on TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP, success BOOLEAN NOT NULL, \
         checksum BLOB NOT NULL, execution_time BIGINT NOT NULL)",
    )
    .execute(&pool)
    .await
    .expect("migrations table");
    for migration in super::MIGRATOR.iter().filter(|m| m.version <= version) {
        sqlx::raw_sql(&migration.sql)
            .execute(&pool)
            .await
            .expect("migration");
        sqlx::query(
            "INSERT INTO _sqlx_migrations (version, description, success, checksum, \
             execution_time) VALUES (?1, ?2, 1, ?3, 0)",
        )
        .bind(migration.version)
        .bind(&*migration.description)
        .bind(&*migration.checksum)
        .execute(&pool)
        .await
        .expect("record");
    }
    pool
}

async fn positions_of(pool: &SqlitePool, execution_id: &str) -> Vec<i64> {
    sqlx::query_scalar("SELECT position FROM events WHERE execution_id = ?1 ORDER BY position")
        .bind(execution_id)
        .fetch_all(pool)
        .await
        .expect("positions")
}

async fn raw(path: &Path) -> SqlitePool {
    SqlitePool::connect_with(SqliteConnectOptions::new().filename(path))
        .await
        .expect("pool")
}

/// A schema-7 database whose newest events retention already deleted (so `sqlite_sequence` is
/// above every stored position) keeps its rows and positions through 0008, loses only the index
/// on `id`, and the next event is positioned above everything ever handed out.
#[tokio::test]
async fn migration_0008_keeps_events_and_positions_above_the_deleted_newest() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("keel.db");
    let pool = database_at_schema(&path, 7).await;
    let event = |id: &str, execution: &str, sequence: i64| {
        format!(
            "INSERT INTO events (id, execution_id, sequence, step_id, type, schema_version, \
             timestamp, payload, causation_id, correlation_id) VALUES ('{id}', '{execution}', \
             {sequence}, NULL, 'execution.created', 1, '2026-01-01T00:00:00Z', '{{}}', '{id}', \
             '{id}');"
        )
    };
    let execution = |id: &str, status: &str| {
        format!(
            "INSERT INTO executions VALUES ('{id}', 'a', '{status}', NULL, '{{}}', NULL, \
             '2026-01-01T00:00:00Z', '2026-01-01T00:00:01Z', NULL, NULL, 1);"
        )
    };
    let rows = [
        execution("e1", "blocked"),
        execution("e2", "completed"),
        event("ev1", "e1", 1),
        event("ev2", "e2", 1),
        "DELETE FROM events WHERE execution_id = 'e2'; DELETE FROM executions WHERE id = 'e2';"
            .to_owned(),
    ]
    .concat();
    sqlx::raw_sql(&rows).execute(&pool).await.expect("rows");
    pool.close().await;

    let store = SqliteStore::open(&path, &StoreOptions::default())
        .await
        .expect("0008 runs");
    let stored: Vec<(i64, String, String)> =
        sqlx::query_as("SELECT position, id, execution_id FROM events ORDER BY position")
            .fetch_all(store.readers())
            .await
            .expect("events");
    assert_eq!(stored, vec![(1, "ev1".into(), "e1".into())]);
    let high_water: i64 = sqlx::query_scalar("SELECT high_water FROM event_positions")
        .fetch_one(store.readers())
        .await
        .expect("high water");
    assert_eq!(
        high_water, 2,
        "position 2 was handed out before it was deleted"
    );
    let unique_columns: Vec<String> = sqlx::query_scalar(
        "SELECT group_concat(c.name, ',') FROM pragma_index_list('events') AS l, \
         pragma_index_info(l.name) AS c WHERE l.\"unique\" = 1 GROUP BY l.name ORDER BY 1",
    )
    .fetch_all(store.readers())
    .await
    .expect("indexes");
    assert_eq!(
        unique_columns,
        vec!["execution_id,sequence", "idempotency_key"],
        "no unique index on id"
    );

    store
        .commit(&[new_execution("e3", "a", &[], at(5))])
        .await
        .expect("a new execution commits");
    store.close().await;
    let pool = raw(&path).await;
    assert_eq!(positions_of(&pool, "e3").await, vec![3]);
    let integrity: String = sqlx::query_scalar("PRAGMA integrity_check")
        .fetch_one(&pool)
        .await
        .expect("integrity check");
    assert_eq!(integrity, "ok");
    let dangling: Vec<(String,)> = sqlx::query_as("SELECT \"table\" FROM pragma_foreign_key_check")
        .fetch_all(&pool)
        .await
        .expect("foreign key check");
    assert!(dangling.is_empty(), "{dangling:?}");
}

/// Retention that deletes the newest events leaves their positions handed out: after a restart
/// the next event is positioned above them, as `AUTOINCREMENT` guaranteed before 0008 (a feed
/// consumer's or webhook's cursor never sees a position twice).
#[tokio::test]
async fn positions_are_not_reused_after_retention_deletes_the_newest_events_and_a_restart() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("keel.db");
    let store = SqliteStore::open(&path, &StoreOptions::default())
        .await
        .expect("open");
    let created = new_execution("old", "a", &[], at(1));
    store
        .commit(std::slice::from_ref(&created))
        .await
        .expect("created");
    store
        .commit(&[finish(
            &created.execution,
            at(2),
            ExecutionStatus::Completed,
        )])
        .await
        .expect("finished");
    let deleted = store
        .delete_terminal_before(at(10), 100)
        .await
        .expect("retention");
    assert_eq!(deleted, 1);
    store.close().await;

    let store = SqliteStore::open(&path, &StoreOptions::default())
        .await
        .expect("reopen");
    store
        .commit(&[new_execution("new", "a", &[], at(20))])
        .await
        .expect("a new execution commits");
    store.close().await;
    let pool = raw(&path).await;
    assert_eq!(
        positions_of(&pool, "new").await,
        vec![3],
        "positions 1 and 2 were handed out to the deleted execution"
    );
}

/// A schema-8 database with an execution in every status comes through 0009 with each row's
/// phase and finish time filled in from its status, and the readers that moved to the new
/// indexes see what they saw before: the non-terminal executions oldest first, a status list,
/// the pending queue, and retention's terminal executions oldest first.
#[tokio::test]
async fn migration_0009_fills_in_the_phase_and_finish_time_of_every_execution() {
    use keel_actors::ids::ExecutionId;
    use keel_actors::store::ListFilter;

    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("keel.db");
    let pool = database_at_schema(&path, 8).await;
    let statuses = [
        ("e1", "pending"),
        ("e2", "running"),
        ("e3", "blocked"),
        ("e4", "completed"),
        ("e5", "failed"),
        ("e6", "cancelled"),
    ];
    let rows: String = statuses
        .iter()
        .enumerate()
        .map(|(index, (id, status))| {
            format!(
                "INSERT INTO executions VALUES ('{id}', 'a', '{status}', NULL, '{{}}', NULL, \
                 '2026-01-01T00:00:0{index}.000000Z', '2026-01-02T00:00:0{index}.000000Z', \
                 NULL, NULL, 1);"
            )
        })
        .collect();
    sqlx::raw_sql(&rows).execute(&pool).await.expect("rows");
    pool.close().await;

    let store = SqliteStore::open(&path, &StoreOptions::default())
        .await
        .expect("0009 runs");
    let stored: Vec<(String, String, Option<String>)> =
        sqlx::query_as("SELECT id, phase, finished_at FROM executions ORDER BY id")
            .fetch_all(store.readers())
            .await
            .expect("rows");
    let finished = |index: usize| Some(format!("2026-01-02T00:00:0{index}.000000Z"));
    assert_eq!(
        stored,
        vec![
            ("e1".into(), "pending".into(), None),
            ("e2".into(), "active".into(), None),
            ("e3".into(), "active".into(), None),
            ("e4".into(), "completed".into(), finished(3)),
            ("e5".into(), "failed".into(), finished(4)),
            ("e6".into(), "cancelled".into(), finished(5)),
        ]
    );
    let ids = |ids: &[&str]| {
        ids.iter()
            .map(|id| ExecutionId::new(*id))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        store.non_terminal_executions().await.expect("recovery"),
        ids(&["e1", "e2", "e3"])
    );
    for (status, expected) in [
        (ExecutionStatus::Blocked, "e3"),
        (ExecutionStatus::Running, "e2"),
        (ExecutionStatus::Pending, "e1"),
        (ExecutionStatus::Failed, "e5"),
    ] {
        let filter = ListFilter {
            status: Some(status),
            limit: 10,
            ..ListFilter::default()
        };
        let listed: Vec<String> = store
            .list_executions(&filter)
            .await
            .expect("list")
            .into_iter()
            .map(|row| row.id.to_string())
            .collect();
        assert_eq!(listed, vec![expected.to_owned()], "{status}");
    }
    let mut counts = store
        .count_executions(&ListFilter::default())
        .await
        .expect("counts");
    counts.sort_by_key(|(status, _)| status.as_str());
    let one_each: Vec<(ExecutionStatus, u64)> = [
        ExecutionStatus::Blocked,
        ExecutionStatus::Cancelled,
        ExecutionStatus::Completed,
        ExecutionStatus::Failed,
        ExecutionStatus::Pending,
        ExecutionStatus::Running,
    ]
    .into_iter()
    .map(|status| (status, 1))
    .collect();
    assert_eq!(
        counts, one_each,
        "counted through the phase index and the live rows"
    );
    let plan: Vec<(i64, i64, i64, String)> = sqlx::query_as(
        "EXPLAIN QUERY PLAN SELECT e.phase, COUNT(*) FROM executions AS e \
         WHERE e.phase <> 'active' GROUP BY e.phase",
    )
    .fetch_all(store.readers())
    .await
    .expect("plan");
    assert!(
        plan.iter()
            .any(|(_, _, _, detail)| detail.contains("COVERING INDEX executions_phase_list")),
        "pending and terminal executions are counted from the index alone: {plan:?}"
    );
    let deleted = store
        .delete_terminal_before(at_text("2026-01-02T00:00:05.000000Z"), 10)
        .await
        .expect("retention");
    assert_eq!(deleted, 2, "e4 and e5 finished before e6");
    assert_eq!(
        store.non_terminal_executions().await.expect("recovery"),
        ids(&["e1", "e2", "e3"])
    );
    store.close().await;
}

fn at_text(text: &str) -> keel_actors::time::Timestamp {
    chrono::DateTime::parse_from_rfc3339(text)
        .expect("a time")
        .with_timezone(&chrono::Utc)
}
