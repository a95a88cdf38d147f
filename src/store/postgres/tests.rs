//! Runs the storage conformance suite on fresh PostgreSQL databases, then the PostgreSQL-only
//! checks: the one-kernel lock, concurrent first starts, schema-version refusal, session
//! settings, exact JSON and time round trips, event positions and the steps projection. Every
//! test skips (and passes) when `KEEL_TEST_POSTGRES_URL` is not set.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use sqlx::{Connection, PgConnection};

use keel_actors::error::StoreError;
use keel_actors::events::{EventBody, NewEvent};
use keel_actors::ids::{ExecutionId, StepId};
use keel_actors::status::{ExecutionStatus, StepStatus};
use keel_actors::store::{ListFilter, StepRow, Store};

use super::super::conformance::{self, advance, at, create, finish, new_execution};
use super::super::rows::StepRecord;
use super::super::{ANOTHER_KERNEL, StoreOptions, map_sqlx_error, open};
use super::test_db::{self, TestDatabase};
use super::{MIGRATOR, PostgresStore, STEP_COLUMNS};

/// Opens a store on `db` with default options.
async fn open_store(db: &TestDatabase) -> PostgresStore {
    PostgresStore::open(&db.url, &StoreOptions::default())
        .await
        .unwrap_or_else(|error| panic!("open: {error}"))
}

/// Returns the message of an `Unavailable` open, failing on anything else.
async fn refusal(url: &str) -> String {
    match open(url, &StoreOptions::default()).await {
        Err(StoreError::Unavailable(message)) => message,
        Err(other) => panic!("wrong class {other:?}"),
        Ok(_) => panic!("opened"),
    }
}

macro_rules! conformance_on_postgres {
    ($($name:ident),+ $(,)?) => {
        $(
            #[tokio::test]
            async fn $name() {
                let Some(db) = test_db::fresh().await else { return };
                let store = open(&db.url, &StoreOptions::default())
                    .await
                    .unwrap_or_else(|error| panic!("open: {error}"));
                conformance::$name(store).await;
            }
        )+
    };
}

conformance_on_postgres!(
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
async fn a_second_kernel_is_refused_until_the_first_closes() {
    let Some(db) = test_db::fresh().await else {
        return;
    };
    let first = open_store(&db).await;
    let message = refusal(&db.url).await;
    assert!(message.starts_with(ANOTHER_KERNEL), "{message}");
    first.ping().await.expect("the first kernel is unaffected");
    first.close().await;
    let second = open_store(&db).await;
    second.ping().await.expect("the second kernel runs");
    assert!(
        matches!(first.ping().await, Err(StoreError::Unavailable(_))),
        "a closed store is unavailable"
    );
}

/// A kernel restarted right after a `kill -9` can reach the server before it has ended the
/// killed kernel's session (it does so once it reads the closed socket): the lock is retried
/// for a moment instead of refusing the restart.
#[tokio::test]
async fn a_kernel_starting_while_the_killed_ones_session_ends_waits_for_the_lock() {
    let Some(db) = test_db::fresh().await else {
        return;
    };
    let mut killed = PgConnection::connect(&db.url).await.expect("connect");
    let held: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1, $2)")
        .bind(super::writer::LOCK_CLASS)
        .bind(super::writer::LOCK_KERNEL)
        .fetch_one(&mut killed)
        .await
        .expect("take the kernel lock");
    assert!(held, "the stand-in for the killed kernel holds the lock");
    let ends = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        drop(killed);
    });
    let restarted = open_store(&db).await;
    restarted.ping().await.expect("the restarted kernel runs");
    ends.await.expect("session ended");
}

/// A write after `close` fails instead of reconnecting: reconnecting would take the lock back
/// and refuse the kernel that opens the database next.
#[tokio::test]
async fn a_closed_store_fails_later_writes_and_never_takes_the_lock_back() {
    let Some(db) = test_db::fresh().await else {
        return;
    };
    let first: Arc<dyn Store> = Arc::new(open_store(&db).await);
    first.close().await;
    let late = first
        .commit(&[new_execution("exec-late", "agent-a", &[], at(1))])
        .await;
    assert!(
        matches!(late, Err(StoreError::Unavailable(_))),
        "a closed store refuses writes: {late:?}"
    );
    let second: Arc<dyn Store> = Arc::new(open_store(&db).await);
    create(&second, "exec-1", "agent-a", &[], at(2)).await;
    assert!(
        first
            .execution(&ExecutionId::new("exec-late"))
            .await
            .is_err(),
        "the closed store reads nothing either"
    );
    assert!(
        second
            .execution(&ExecutionId::new("exec-late"))
            .await
            .expect("read")
            .is_none(),
        "the late write was not written"
    );
}

/// Every migration this binary carries, in order (later issues add versions beyond 0008).
fn known_versions() -> Vec<i64> {
    let mut versions: Vec<i64> = MIGRATOR.iter().map(|migration| migration.version).collect();
    versions.sort_unstable();
    versions
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_kernels_starting_at_once_on_an_empty_database_migrate_it_once() {
    let Some(db) = test_db::fresh().await else {
        return;
    };
    let options = StoreOptions::default();
    let (left, right) = tokio::join!(
        PostgresStore::open(&db.url, &options),
        PostgresStore::open(&db.url, &options)
    );
    let (winner, loser) = match (left, right) {
        (Ok(store), Err(error)) | (Err(error), Ok(store)) => (store, error),
        (left, right) => panic!("exactly one kernel must start: {left:?} / {right:?}"),
    };
    assert!(
        matches!(&loser, StoreError::Unavailable(message) if message.starts_with(ANOTHER_KERNEL)),
        "{loser:?}"
    );
    let migrations: Vec<(i64, bool)> =
        sqlx::query_as("SELECT version, success FROM _sqlx_migrations ORDER BY version")
            .fetch_all(winner.readers())
            .await
            .expect("migrations read");
    assert_eq!(
        migrations,
        known_versions()
            .into_iter()
            .map(|version| (version, true))
            .collect::<Vec<_>>()
    );
    let store: Arc<dyn Store> = Arc::new(winner);
    conformance::create(&store, "exec-1", "agent-a", &[], at(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_migrators_serialise_on_the_migration_lock() {
    let Some(db) = test_db::fresh().await else {
        return;
    };
    let migrate = || async {
        let mut connection = PgConnection::connect(&db.url).await.expect("connect");
        let result = MIGRATOR.run_direct(&mut connection).await;
        let _ = connection.close().await;
        result
    };
    let (left, right, third) = tokio::join!(migrate(), migrate(), migrate());
    for result in [left, right, third] {
        result.expect("every migrator succeeds");
    }
    let store = open_store(&db).await;
    let versions: Vec<i64> = sqlx::query_scalar("SELECT version FROM _sqlx_migrations")
        .fetch_all(store.readers())
        .await
        .expect("migrations read");
    assert_eq!(versions, known_versions());
}

/// Migration 0008: no index on `events.id` (no query reads one; the kernel makes the ids), the
/// per-execution uniqueness of sequences stays.
#[tokio::test]
async fn events_keep_their_sequence_uniqueness_and_lose_the_index_on_id() {
    let Some(db) = test_db::fresh().await else {
        return;
    };
    let store = open_store(&db).await;
    let unique: Vec<String> = sqlx::query_scalar(
        "SELECT conname::text FROM pg_constraint \
         WHERE conrelid = 'events'::regclass AND contype = 'u' ORDER BY 1",
    )
    .fetch_all(store.readers())
    .await
    .expect("constraints");
    assert_eq!(unique, vec!["events_execution_id_sequence_key"]);
}

#[tokio::test]
async fn a_schema_newer_than_the_binary_is_refused_with_the_sqlite_message() {
    let Some(db) = test_db::fresh().await else {
        return;
    };
    let store = open_store(&db).await;
    let store_dyn: Arc<dyn Store> = Arc::new(store);
    create(&store_dyn, "exec-future", "agent-a", &[], at(1)).await;
    drop(store_dyn);
    let mut connection = PgConnection::connect(&db.url).await.expect("connect");
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (9999, 'from the future', TRUE, '\\x00', 0)",
    )
    .execute(&mut connection)
    .await
    .expect("tamper");
    let message = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        loop {
            // The dropped store's session ends asynchronously; until then the lock is held.
            let message = refusal(&db.url).await;
            if !message.starts_with(ANOTHER_KERNEL) {
                return message;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the dropped store releases its lock");
    let newest = super::schema::MIGRATOR
        .iter()
        .map(|migration| migration.version)
        .max()
        .unwrap_or_default();
    assert_eq!(
        message,
        format!("database schema version 9999 is newer than this keel binary supports ({newest})")
    );
    let events: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM events")
        .fetch_one(&mut connection)
        .await
        .expect("count");
    assert_eq!(events, 1, "refusal leaves the data alone");
}

#[tokio::test]
async fn sessions_are_bounded_and_readers_cannot_write() {
    let Some(db) = test_db::fresh().await else {
        return;
    };
    let options = StoreOptions {
        statement_timeout: std::time::Duration::from_millis(1500),
        ..StoreOptions::default()
    };
    let store = PostgresStore::open(&db.url, &options).await.expect("open");
    let setting = |name: &'static str| {
        let readers = store.readers().clone();
        async move {
            sqlx::query_scalar::<_, String>(&format!("SHOW {name}"))
                .fetch_one(&readers)
                .await
                .expect("show")
        }
    };
    assert_eq!(setting("statement_timeout").await, "1500ms");
    assert_eq!(setting("idle_in_transaction_session_timeout").await, "3s");
    assert_eq!(setting("application_name").await, "keel");
    let over_tcp: bool = sqlx::query_scalar("SELECT inet_client_addr() IS NOT NULL")
        .fetch_one(store.readers())
        .await
        .expect("client address");
    if over_tcp {
        assert_eq!(setting("tcp_keepalives_idle").await, "10");
        assert_eq!(setting("tcp_keepalives_interval").await, "5");
        assert_eq!(setting("tcp_keepalives_count").await, "3");
    }
    let write = sqlx::query("DELETE FROM events")
        .execute(store.readers())
        .await
        .expect_err("read-only");
    assert!(matches!(map_sqlx_error(write), StoreError::Unavailable(_)));
    let slow = sqlx::query("SELECT pg_sleep(5)")
        .execute(store.readers())
        .await
        .expect_err("cancelled by statement_timeout");
    assert!(matches!(map_sqlx_error(slow), StoreError::Unavailable(_)));
}

#[tokio::test]
async fn json_and_times_round_trip_exactly_whatever_the_session_time_zone() {
    let Some(db) = test_db::fresh().await else {
        return;
    };
    // A session time zone of +05:30 must not shift stored or listed times.
    let url = format!("{}?options=-c%20TimeZone%3DAsia%2FKolkata", db.url);
    let store = open(&url, &StoreOptions::default()).await.expect("open");
    let mut commit = new_execution("exec-json", "agent-a", &[("nul", "a")], at(123_457));
    let input = json!({"nul": "a\u{0}b", "float": 1e18, "tiny": 5e-324, "int": u64::MAX});
    commit.execution.input = Arc::new(input.clone());
    if let EventBody::ExecutionCreated { input: body, .. } = &mut commit.events[0].body {
        *body = input.clone();
    }
    store
        .commit(std::slice::from_ref(&commit))
        .await
        .expect("commit");
    let row = store
        .execution(&commit.execution.id)
        .await
        .expect("read")
        .expect("row");
    assert_eq!(row, commit.execution);
    assert_eq!(row.input["float"].as_f64(), Some(1e18), "still a float");
    let events = store
        .events(&commit.execution.id, 0, 10)
        .await
        .expect("events");
    assert_eq!(events, commit.events);
    let page = store
        .list_executions(&ListFilter {
            after: Some((at(123_458), "exec-a".into())),
            limit: 10,
            ..ListFilter::default()
        })
        .await
        .expect("list");
    assert_eq!(conformance::ids(&page), vec!["exec-json"]);
    let nul_filter = ListFilter {
        agent_id: Some("agent\0a".into()),
        limit: 10,
        ..ListFilter::default()
    };
    assert!(
        store
            .list_executions(&nul_filter)
            .await
            .expect("list")
            .is_empty()
    );
    let nul_id = ExecutionId::new("exec\0json");
    assert_eq!(store.execution(&nul_id).await.expect("read"), None);
}

#[tokio::test]
async fn event_positions_increase_in_commit_order_across_executions_and_batches() {
    let Some(db) = test_db::fresh().await else {
        return;
    };
    let store = open_store(&db).await;
    let readers = store.readers().clone();
    let store: Arc<dyn Store> = Arc::new(store);
    let b = create(&store, "exec-b", "agent-a", &[], at(1)).await;
    let a = create(&store, "exec-a", "agent-a", &[], at(2)).await;
    let resumed = || NewEvent::execution(EventBody::ExecutionResumed { reason: "r".into() });
    let b2 = advance(&b, at(3), ExecutionStatus::Running, vec![resumed()]);
    let b3 = advance(
        &b2.execution,
        at(4),
        ExecutionStatus::Running,
        vec![resumed(), resumed()],
    );
    let a2 = advance(&a, at(5), ExecutionStatus::Running, vec![resumed()]);
    store.commit(&[b2, a2, b3]).await.expect("batch commits");
    let order: Vec<(i64, String, i64)> =
        sqlx::query_as("SELECT position, execution_id, sequence FROM events ORDER BY position")
            .fetch_all(&readers)
            .await
            .expect("positions");
    let keys: Vec<(&str, i64)> = order
        .iter()
        .map(|(_, id, sequence)| (id.as_str(), *sequence))
        .collect();
    assert_eq!(
        keys,
        vec![
            ("exec-b", 1),
            ("exec-a", 1),
            ("exec-b", 2),
            ("exec-a", 2),
            ("exec-b", 3),
            ("exec-b", 4)
        ]
    );
    assert!(order.windows(2).all(|pair| pair[0].0 < pair[1].0));
}

#[tokio::test]
async fn steps_are_upserted_and_retention_deletes_every_row_of_an_execution() {
    let Some(db) = test_db::fresh().await else {
        return;
    };
    let store = open_store(&db).await;
    let readers = store.readers().clone();
    let store: Arc<dyn Store> = Arc::new(store);
    let row = create(&store, "exec-steps", "agent-a", &[("team", "ml")], at(1)).await;
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
    let started = NewEvent::step(
        &step_id,
        EventBody::StepStarted {
            runner_id: "runner-1".into(),
        },
    );
    let mut first = advance(&row, at(2), ExecutionStatus::Blocked, vec![started]);
    first.steps = vec![pending.clone()];
    let mut second = finish(&first.execution, at(3), ExecutionStatus::Completed);
    second.steps = vec![dispatched.clone()];
    store.commit(&[first, second]).await.expect("batch commits");
    let read_steps = || async {
        let records = sqlx::query_as::<_, StepRecord>(&format!("SELECT {STEP_COLUMNS} FROM steps"))
            .fetch_all(&readers)
            .await
            .expect("steps read");
        records
            .into_iter()
            .map(|record| record.into_step().expect("decodes"))
            .collect::<Vec<_>>()
    };
    assert_eq!(read_steps().await, vec![dispatched]);

    assert_eq!(
        store
            .delete_terminal_before(at(4), 10)
            .await
            .expect("delete"),
        1
    );
    for table in ["executions", "events", "execution_labels", "steps"] {
        let column = if table == "executions" {
            "id"
        } else {
            "execution_id"
        };
        let count: i64 =
            sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {table} WHERE {column} = $1"))
                .bind("exec-steps")
                .fetch_one(&readers)
                .await
                .expect("count");
        assert_eq!(count, 0, "{table} emptied");
    }
}
