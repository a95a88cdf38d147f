//! Runs the storage conformance suite on fresh SQLite files, then the SQLite-only checks:
//! reopening, schema-version refusal, URL handling, pragmas, the steps projection, event
//! positions and the mapping of lock and closed-pool failures.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqlitePool};
use sqlx::{Connection, SqliteConnection};
use tempfile::TempDir;

use keel_actors::error::StoreError;
use keel_actors::events::{EventBody, NewEvent};
use keel_actors::ids::{ExecutionId, StepId};
use keel_actors::status::{ExecutionStatus, StepStatus};
use keel_actors::store::{ListFilter, StepRow, Store};

use super::conformance::{self, advance, at, create, finish, new_execution};
use super::rows::{STEP_COLUMNS, StepRecord};
use super::{
    Backend, SQLITE_NON_TERMINAL, SqliteStore, StoreOptions, TERMINAL_STATUSES_SQL, map_sqlx_error,
    open, parse_url, sqlite_code_is_unavailable, sqlstate_is_unavailable,
};

/// Returns a temp directory and the URL of a database file inside it.
fn temp_url() -> (TempDir, PathBuf, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("keel.db");
    let url = format!("sqlite://{}", path.display());
    (dir, path, url)
}

/// Opens a fresh store in a temp directory (kept alive by the returned guard).
async fn fresh_store() -> (TempDir, Arc<dyn Store>) {
    let (dir, _path, url) = temp_url();
    let store = open(&url, &StoreOptions::default())
        .await
        .unwrap_or_else(|error| panic!("open: {error}"));
    (dir, store)
}

/// Opens a plain pool on the file, bypassing the store, to inspect or tamper with it.
async fn raw_pool(path: &Path) -> SqlitePool {
    SqlitePool::connect_with(SqliteConnectOptions::new().filename(path))
        .await
        .expect("raw pool")
}

/// Counts the rows of `table` belonging to one execution.
async fn count(pool: &SqlitePool, table: &str, execution_id: &str) -> i64 {
    let column = if table == "executions" {
        "id"
    } else {
        "execution_id"
    };
    sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {table} WHERE {column} = ?"))
        .bind(execution_id)
        .fetch_one(pool)
        .await
        .expect("count")
}

macro_rules! conformance_on_sqlite {
    ($($name:ident),+ $(,)?) => {
        $(
            #[tokio::test]
            async fn $name() {
                let (_dir, store) = fresh_store().await;
                conformance::$name(store).await;
            }
        )+
    };
}

conformance_on_sqlite!(
    commit_round_trips_every_event_field,
    unknown_execution_reads_as_none,
    batch_is_all_or_nothing,
    sequences_stay_contiguous_and_unique,
    inconsistent_commits_are_refused,
    execution_row_follows_commits,
    concurrent_commits_all_land,
    ping_answers,
    list_orders_newest_first,
    list_pages_through_a_cursor,
    list_filters_by_status_agent_and_every_label,
    non_terminal_executions_oldest_first,
    delete_terminal_before_is_bounded_and_spares_live_executions,
    tool_calls_since_lists_allowed_calls_oldest_first,
    the_feed_reads_every_execution_in_position_order,
    the_feed_is_read_a_budget_at_a_time,
    a_backlog_of_large_events_is_read_a_budget_at_a_time,
    webhook_positions_round_trip,
    tool_results_since_lists_step_results_oldest_first,
    runner_results_since_names_the_runner_of_each_remote_result,
    a_nul_in_a_result_leaves_the_runner_results_readable,
    a_nul_in_one_input_leaves_the_agents_queue_readable,
    many_executions_in_one_batch_are_all_or_nothing,
    a_group_writes_every_commit_but_the_failing_ones,
    a_clean_group_answers_ok_for_each_commit,
    a_reused_creation_key_fails_only_its_commit,
    a_groups_events_take_positions_in_commit_order,
    a_wrong_previous_status_still_writes_the_new_status,
    a_creation_key_names_one_execution,
    pending_queue_lists_an_agents_pending_executions_with_priorities,
    pending_and_running_executions_carry_their_labels,
    running_executions_lists_an_agents_running_and_blocked_executions,
    active_local_steps_counts_unfinished_local_steps_of_a_tool,
);

#[tokio::test]
async fn reopening_the_same_file_keeps_everything_and_continues_sequences() {
    let (_dir, path, url) = temp_url();
    let store = SqliteStore::open(&path, &StoreOptions::default())
        .await
        .expect("open");
    let first = create_via(&store, "exec-keep").await;
    let before_events = store.events(&first.id, 0, 100).await.expect("events");
    store.close().await;

    let reopened = open(&url, &StoreOptions::default())
        .await
        .unwrap_or_else(|error| panic!("reopen: {error}"));
    assert_eq!(
        reopened.execution(&first.id).await.expect("row"),
        Some(first.clone())
    );
    assert_eq!(
        reopened.events(&first.id, 0, 100).await.expect("events"),
        before_events
    );
    let listed = reopened
        .list_executions(&ListFilter {
            limit: 10,
            ..ListFilter::default()
        })
        .await
        .expect("list");
    assert_eq!(listed, vec![first.clone()]);
    let resumed = NewEvent::execution(EventBody::ExecutionResumed {
        reason: "after restart".into(),
    });
    reopened
        .commit(&[advance(
            &first,
            at(9),
            ExecutionStatus::Running,
            vec![resumed],
        )])
        .await
        .expect("commit");
    assert_eq!(
        conformance::sequences(&reopened, "exec-keep").await,
        vec![1, 2]
    );
}

/// Creates one execution through a concrete store and returns its row.
async fn create_via(store: &SqliteStore, id: &str) -> keel_actors::store::ExecutionRow {
    let commit = new_execution(id, "agent-a", &[("team", "ml")], at(1));
    store
        .commit(std::slice::from_ref(&commit))
        .await
        .expect("commit");
    commit.execution
}

#[tokio::test]
async fn a_schema_newer_than_the_binary_is_refused_with_a_clear_message() {
    let (_dir, path, url) = temp_url();
    let store = SqliteStore::open(&path, &StoreOptions::default())
        .await
        .expect("open");
    create_via(&store, "exec-future").await;
    store.close().await;
    let pool = raw_pool(&path).await;
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (9999, 'from the future', 1, x'00', 0)",
    )
    .execute(&pool)
    .await
    .expect("tamper");
    pool.close().await;

    let Err(StoreError::Unavailable(message)) =
        open(&url, &StoreOptions::default()).await.map(|_| ())
    else {
        panic!("a newer schema must be refused as unavailable");
    };
    let newest = super::sqlite::MIGRATOR
        .iter()
        .map(|migration| migration.version)
        .max()
        .unwrap_or_default();
    assert_eq!(
        message,
        format!("database schema version 9999 is newer than this keel binary supports ({newest})")
    );
    let pool = raw_pool(&path).await;
    assert_eq!(
        count(&pool, "events", "exec-future").await,
        1,
        "refusal leaves the data alone"
    );
}

#[tokio::test]
async fn open_accepts_both_sqlite_url_forms_and_creates_missing_directories() {
    let dir = tempfile::tempdir().expect("temp dir");
    let nested = dir.path().join("a/b/keel.db");
    let short = dir.path().join("c/keel.db");
    for url in [
        format!("sqlite://{}", nested.display()),
        format!("sqlite:{}", short.display()),
    ] {
        let store = open(&url, &StoreOptions::default())
            .await
            .unwrap_or_else(|error| panic!("{url}: {error}"));
        store.ping().await.expect("ping");
    }
    assert!(nested.is_file() && short.is_file());
    assert_eq!(
        parse_url("sqlite://data/keel.db").expect("parses"),
        Backend::Sqlite("data/keel.db".into())
    );
    assert_eq!(
        parse_url("sqlite:keel.db").expect("parses"),
        Backend::Sqlite("keel.db".into())
    );
    assert_eq!(
        parse_url("sqlite:///var/lib/keel.db").expect("parses"),
        Backend::Sqlite("/var/lib/keel.db".into())
    );
}

#[tokio::test]
async fn other_urls_are_refused_without_echoing_secrets() {
    let refusal = |url: &'static str| async move {
        match open(url, &StoreOptions::default()).await {
            Err(StoreError::Unavailable(message)) => message,
            Err(other) => panic!("{url}: wrong class {other:?}"),
            Ok(_) => panic!("{url}: opened"),
        }
    };
    // Nothing listens on port 1: the postgres backend fails at once, naming no password.
    for url in [
        "postgres://keel:s3cret@127.0.0.1:1/keel",
        "postgresql://keel:s3cret@127.0.0.1:1/keel",
    ] {
        let message = refusal(url).await;
        assert!(
            message.contains("127.0.0.1:1/keel") && !message.contains("s3cret"),
            "{message}"
        );
    }
    let unknown = refusal("mysql://keel:s3cret@db/keel").await;
    assert!(
        unknown.contains("\"mysql\"") && !unknown.contains("s3cret"),
        "{unknown}"
    );
    for url in [
        "sqlite::memory:",
        "sqlite://",
        "sqlite:",
        "sqlite://keel.db?mode=rwc",
        "keel.db",
    ] {
        refusal(url).await;
    }
}

#[tokio::test]
async fn a_missing_file_is_unavailable_when_creation_is_off() {
    let (_dir, path, url) = temp_url();
    let options = StoreOptions {
        create_if_missing: false,
        ..StoreOptions::default()
    };
    let result = open(&url, &options).await.map(|_| ());
    assert!(
        matches!(result, Err(StoreError::Unavailable(_))),
        "got {result:?}"
    );
    assert!(!path.exists());
}

#[tokio::test]
async fn writer_uses_wal_full_sync_foreign_keys_and_readers_cannot_write() {
    let (_dir, path, _url) = temp_url();
    let options = StoreOptions {
        busy_timeout: Duration::from_millis(1234),
        ..StoreOptions::default()
    };
    let store = SqliteStore::open(&path, &options).await.expect("open");
    let readers = store.readers();
    let store = &store;
    let pragma =
        |name: &'static str| async move { store.writer_pragma(name).await.expect("pragma") };
    let journal_mode: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(readers)
        .await
        .expect("journal mode");
    assert_eq!(journal_mode, "wal");
    assert_eq!(pragma("synchronous").await, 2, "2 is FULL");
    assert_eq!(
        pragma("foreign_keys").await,
        0,
        "the writer keeps them (writer.rs)"
    );
    assert_eq!(pragma("busy_timeout").await, 1234);
    let write = sqlx::query("DELETE FROM events")
        .execute(readers)
        .await
        .expect_err("read-only");
    assert!(matches!(map_sqlx_error(write), StoreError::Unavailable(_)));
}

#[tokio::test]
async fn steps_are_upserted_and_retention_deletes_every_row_of_an_execution() {
    let (_dir, path, _url) = temp_url();
    let store = SqliteStore::open(&path, &StoreOptions::default())
        .await
        .expect("open");
    let row = create_via(&store, "exec-steps").await;
    let step_id = StepId::new("step-1");
    let pending = StepRow {
        id: step_id.clone(),
        execution_id: row.id.clone(),
        tool_id: "http.get".into(),
        status: StepStatus::Pending,
        attempt: 1,
        max_attempts: 3,
        remote: true,
        job_id: None,
        runner_id: None,
        deadline: Some(at(900)),
        updated_at: at(2),
    };
    let dispatched = StepRow {
        status: StepStatus::Dispatched,
        job_id: Some("job-1".into()),
        runner_id: Some("runner-1".into()),
        deadline: None,
        updated_at: at(3),
        ..pending.clone()
    };
    let mut first = advance(
        &row,
        at(2),
        ExecutionStatus::Blocked,
        vec![NewEvent::step(
            &step_id,
            EventBody::StepStarted {
                runner_id: "runner-1".into(),
            },
        )],
    );
    first.steps = vec![pending];
    let mut second = finish(&first.execution, at(3), ExecutionStatus::Completed);
    second.steps = vec![dispatched.clone()];
    store.commit(&[first, second]).await.expect("batch commits");

    let readers = store.readers();
    let sql = format!("SELECT {STEP_COLUMNS} FROM steps");
    let records = sqlx::query_as::<_, StepRecord>(&sql)
        .fetch_all(readers)
        .await
        .expect("steps read");
    let steps: Vec<StepRow> = records
        .into_iter()
        .map(|record| record.into_step().expect("decodes"))
        .collect();
    assert_eq!(steps, vec![dispatched]);

    assert_eq!(
        store
            .delete_terminal_before(at(4), 10)
            .await
            .expect("delete"),
        1
    );
    for table in ["executions", "events", "execution_labels", "steps"] {
        assert_eq!(
            count(readers, table, "exec-steps").await,
            0,
            "{table} emptied"
        );
    }
}

#[tokio::test]
async fn event_positions_increase_in_commit_order_across_executions() {
    let (_dir, path, _url) = temp_url();
    let store = SqliteStore::open(&path, &StoreOptions::default())
        .await
        .expect("open");
    let store_dyn: Arc<dyn Store> = Arc::new(store.clone());
    let b = create(&store_dyn, "exec-b", "agent-a", &[], at(1)).await;
    let a = create(&store_dyn, "exec-a", "agent-a", &[], at(2)).await;
    let resumed = || NewEvent::execution(EventBody::ExecutionResumed { reason: "r".into() });
    store_dyn
        .commit(&[advance(
            &b,
            at(3),
            ExecutionStatus::Running,
            vec![resumed()],
        )])
        .await
        .expect("commit");
    store_dyn
        .commit(&[advance(
            &a,
            at(4),
            ExecutionStatus::Running,
            vec![resumed()],
        )])
        .await
        .expect("commit");
    let readers = store.readers();
    let order: Vec<(i64, String, i64)> =
        sqlx::query_as("SELECT position, execution_id, sequence FROM events ORDER BY position")
            .fetch_all(readers)
            .await
            .expect("positions");
    let keys: Vec<(&str, i64)> = order
        .iter()
        .map(|(_, id, sequence)| (id.as_str(), *sequence))
        .collect();
    assert_eq!(
        keys,
        vec![("exec-b", 1), ("exec-a", 1), ("exec-b", 2), ("exec-a", 2)]
    );
    assert!(order.windows(2).all(|pair| pair[0].0 < pair[1].0));
}

#[tokio::test]
async fn a_locked_database_makes_commits_unavailable_until_released() {
    let (_dir, path, _url) = temp_url();
    let options = StoreOptions {
        busy_timeout: Duration::from_millis(100),
        ..StoreOptions::default()
    };
    let store = SqliteStore::open(&path, &options).await.expect("open");
    let mut other = SqliteConnection::connect_with(&SqliteConnectOptions::new().filename(&path))
        .await
        .expect("connect");
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut other)
        .await
        .expect("lock");
    let commit = new_execution("exec-locked", "agent-a", &[], at(1));
    let result = store.commit(std::slice::from_ref(&commit)).await;
    assert!(
        matches!(result, Err(StoreError::Unavailable(_))),
        "got {result:?}"
    );
    sqlx::query("ROLLBACK")
        .execute(&mut other)
        .await
        .expect("unlock");
    store
        .commit(&[commit])
        .await
        .expect("commit after the lock is released");
}

#[tokio::test]
async fn a_closed_store_is_unavailable() {
    let (_dir, path, _url) = temp_url();
    let store = SqliteStore::open(&path, &StoreOptions::default())
        .await
        .expect("open");
    store.close().await;
    assert!(matches!(
        store.ping().await,
        Err(StoreError::Unavailable(_))
    ));
    let result = store
        .commit(&[new_execution("exec-x", "agent-a", &[], at(1))])
        .await;
    assert!(matches!(result, Err(StoreError::Unavailable(_))));
    let read = store.execution(&ExecutionId::new("exec-x")).await;
    assert!(matches!(read, Err(StoreError::Unavailable(_))));
}

#[test]
fn sqlx_errors_map_to_store_error_classes() {
    assert!(matches!(
        map_sqlx_error(sqlx::Error::RowNotFound),
        StoreError::NotFound(_)
    ));
    assert!(matches!(
        map_sqlx_error(sqlx::Error::PoolTimedOut),
        StoreError::Unavailable(_)
    ));
    assert!(matches!(
        map_sqlx_error(sqlx::Error::ColumnNotFound("x".into())),
        StoreError::Internal(_)
    ));
    // SQLITE_BUSY, SQLITE_BUSY_SNAPSHOT, SQLITE_READONLY, SQLITE_IOERR_WRITE, SQLITE_CANTOPEN.
    for code in ["5", "517", "8", "778", "14"] {
        assert!(sqlite_code_is_unavailable(code), "{code}");
    }
    // SQLITE_CONSTRAINT_UNIQUE, SQLITE_CORRUPT, SQLITE_ERROR.
    for code in ["2067", "11", "1"] {
        assert!(!sqlite_code_is_unavailable(code), "{code}");
    }
    // Connection failure, admin shutdown, too many connections, read-only transaction.
    for code in ["08006", "57P01", "53300", "25006"] {
        assert!(sqlstate_is_unavailable(code), "{code}");
    }
    // Unique violation, syntax error, serialization failure.
    for code in ["23505", "42601", "40001"] {
        assert!(!sqlstate_is_unavailable(code), "{code}");
    }
}

#[test]
fn terminal_statuses_sql_lists_exactly_the_terminal_statuses() {
    let terminal: Vec<String> = ExecutionStatus::ALL
        .into_iter()
        .filter(|status| status.is_terminal())
        .map(|status| format!("'{status}'"))
        .collect();
    assert_eq!(TERMINAL_STATUSES_SQL, format!("({})", terminal.join(", ")));
    let sqlite_schema = include_str!("../../migrations/sqlite/0001_init.sql");
    let postgres_schema = include_str!("../../migrations/postgres/0001_init.sql");
    assert!(
        sqlite_schema.contains(TERMINAL_STATUSES_SQL)
            && postgres_schema.contains(TERMINAL_STATUSES_SQL)
    );
    // SQLite's phases (migration 0009): the index predicates the readers repeat, and the
    // phase each status is written with, as the CHECK on `phase` spells it.
    let sqlite_0009 = include_str!("../../migrations/sqlite/0009_execution_phase.sql");
    for words in [
        SQLITE_NON_TERMINAL,
        super::PENDING,
        "CASE WHEN status = 'running' OR status = 'blocked' THEN 'active' ELSE status END",
        "finished_at IS NULL OR status = 'completed' OR status = 'failed' OR status = 'cancelled'",
    ] {
        assert!(sqlite_0009.contains(words), "{words}");
    }
    for status in ExecutionStatus::ALL {
        assert_eq!(
            SQLITE_NON_TERMINAL.contains(&format!("'{}'", super::phase(status))),
            !status.is_terminal(),
            "{status}"
        );
    }
    // PostgreSQL's phases (migration 0007): the index predicates the readers repeat, and which
    // phases are not terminal.
    let postgres_0007 = include_str!("../../migrations/postgres/0007_hot_execution_updates.sql");
    for words in [
        TERMINAL_STATUSES_SQL,
        super::PG_NON_TERMINAL,
        super::PENDING,
        "CASE WHEN status IN ('running', 'blocked') THEN 'active' ELSE status END",
    ] {
        assert!(postgres_0007.contains(words), "{words}");
    }
    for status in ExecutionStatus::ALL {
        assert_eq!(
            super::PG_NON_TERMINAL.contains(&format!("'{}'", super::phase(status))),
            !status.is_terminal(),
            "{status}"
        );
    }
}

/// The in-memory test store answers the running-slot and queue reads as the backends do (agent
/// groups in the actor tests load from it).
#[tokio::test]
async fn the_memory_store_answers_the_guardrail_reads_as_the_backends_do() {
    let store: Arc<dyn Store> = Arc::new(keel_actors::testing::MemoryStore::default());
    conformance::running_executions_lists_an_agents_running_and_blocked_executions(store).await;
    let store: Arc<dyn Store> = Arc::new(keel_actors::testing::MemoryStore::default());
    conformance::active_local_steps_counts_unfinished_local_steps_of_a_tool(store).await;
    let store: Arc<dyn Store> = Arc::new(keel_actors::testing::MemoryStore::default());
    conformance::pending_and_running_executions_carry_their_labels(store).await;
    let store: Arc<dyn Store> = Arc::new(keel_actors::testing::MemoryStore::default());
    conformance::runner_results_since_names_the_runner_of_each_remote_result(store).await;
}

/// Returns SQLite's query plan of `sql` (each `?` bound to `bind`).
async fn plan(pool: &SqlitePool, sql: &str, bind: Option<&str>) -> String {
    let explain = format!("EXPLAIN QUERY PLAN {sql}");
    let mut query = sqlx::query_as::<_, (i64, i64, i64, String)>(&explain);
    if let Some(bind) = bind {
        query = query.bind(bind);
    }
    let rows = query.fetch_all(pool).await.expect("plan");
    rows.into_iter()
        .map(|(_, _, _, detail)| detail)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Migration 0005: the breaker rebuild and the queued-jobs gauge read partial indexes instead
/// of scanning every event and every step.
#[tokio::test]
async fn step_results_and_queued_jobs_are_read_through_their_partial_indexes() {
    let (_dir, path, url) = temp_url();
    let store = open(&url, &StoreOptions::default())
        .await
        .unwrap_or_else(|error| panic!("open: {error}"));
    let pool = raw_pool(&path).await;
    let results = super::tool_results::TEMPLATE
        .replace("{time}", "e.timestamp")
        .replace("{since}", "?");
    let results_plan = plan(&pool, &results, Some("2026-01-01T00:00:00Z")).await;
    assert!(
        results_plan.contains("events_step_result_time"),
        "{results_plan}"
    );
    let queued = super::depths::QUEUED.replace("{remote}", "remote = 1");
    let queued_plan = plan(&pool, &queued, None).await;
    assert!(queued_plan.contains("steps_queued_remote"), "{queued_plan}");
    let local = super::creation::LOCAL_STEPS
        .replace("{tool}", "?")
        .replace("{local}", "remote = 0");
    let local_plan = plan(&pool, &local, Some("shell")).await;
    assert!(local_plan.contains("steps_active_local"), "{local_plan}");
    let recovery = super::recovery::query(
        "e.created_at",
        SQLITE_NON_TERMINAL,
        super::sqlite::SQLITE_RECOVERY_INDEX,
    );
    let recovery_plan = plan(&pool, &recovery, None).await;
    assert!(
        recovery_plan.contains("executions_non_terminal") && !recovery_plan.contains("TEMP B-TREE"),
        "{recovery_plan}"
    );
    drop(store);
}
