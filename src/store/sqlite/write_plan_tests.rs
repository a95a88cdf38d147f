//! What SQLite does per row the writer thread writes: no temporary b-tree for a partial index
//! predicate or a CHECK (migrations 0006 and 0007). A constant `IN` list of more than two values is evaluated by
//! building one (`OpenEphemeral`) each time a statement runs; before 0006 every execution cost
//! the writer about a hundred of them.

use super::super::StoreOptions;
use super::SqliteStore;
use super::event_rows::{ROWS, sql};
use super::write::{
    INSERT_EXECUTION, UPDATE_EXECUTION, UPDATE_EXECUTION_SAME_PHASE, UPDATE_EXECUTION_SAME_STATUS,
    UPSERT_STEP,
};

/// A store on a new database in a temporary directory (kept as long as the first value).
async fn fresh() -> (tempfile::TempDir, SqliteStore) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteStore::open(&dir.path().join("keel.db"), &StoreOptions::default())
        .await
        .expect("open");
    (dir, store)
}

/// Counts the temporary b-trees a statement's program opens.
async fn temporary_btrees(store: &SqliteStore, sql: &str) -> usize {
    opcodes(store, sql, "OpenEphemeral").await
}

/// Counts the instructions `opcode` in a statement's program.
async fn opcodes(store: &SqliteStore, sql: &str, opcode: &str) -> usize {
    program(store, sql)
        .await
        .iter()
        .filter(|(op, _)| op == opcode)
        .count()
}

/// A statement's program: each instruction's opcode and P2 operand (`EXPLAIN`).
async fn program(store: &SqliteStore, sql: &str) -> Vec<(String, i64)> {
    use sqlx::Row;
    let rows = sqlx::query(&format!("EXPLAIN {sql}"))
        .fetch_all(store.readers())
        .await
        .unwrap_or_else(|error| panic!("explain {sql}: {error}"));
    rows.iter()
        .map(|row| {
            let opcode = row.try_get::<String, _>(1).unwrap_or_default();
            (opcode, row.try_get::<i64, _>(3).unwrap_or(-1))
        })
        .collect()
}

#[tokio::test]
async fn the_writers_statements_evaluate_index_predicates_without_temporary_btrees() {
    let (_dir, store) = fresh().await;
    for (index, rows) in ROWS.iter().enumerate() {
        let events = sql(index).expect("an event insert");
        assert_eq!(temporary_btrees(&store, events).await, 0, "{rows} events");
    }
    // Before 0006 and 0007: 3, 5 and 5 (partial indexes and CHECKs with IN lists).
    assert_eq!(
        temporary_btrees(&store, INSERT_EXECUTION).await,
        0,
        "new execution"
    );
    assert_eq!(
        temporary_btrees(&store, UPDATE_EXECUTION).await,
        0,
        "execution"
    );
    assert_eq!(temporary_btrees(&store, UPSERT_STEP).await, 0, "step");
    assert_eq!(
        temporary_btrees(&store, UPDATE_EXECUTION_SAME_STATUS).await,
        0,
        "execution, same status"
    );
}

/// An update that keeps the phase (a flip between running and blocked) or the status leaves
/// every index of `executions` alone (migration 0009), where the full update deletes and
/// reinserts an entry in the four that read the phase or the finish time. Before 0009 the
/// flip deleted and reinserted entries in four indexes.
#[tokio::test]
async fn an_update_that_keeps_the_phase_maintains_no_index() {
    let (_dir, store) = fresh().await;
    assert_eq!(opcodes(&store, UPDATE_EXECUTION, "IdxDelete").await, 4);
    assert_eq!(
        opcodes(&store, UPDATE_EXECUTION_SAME_PHASE, "IdxDelete").await,
        0
    );
    assert_eq!(
        opcodes(&store, UPDATE_EXECUTION_SAME_STATUS, "IdxDelete").await,
        0
    );
    assert_eq!(
        temporary_btrees(&store, UPDATE_EXECUTION_SAME_PHASE).await,
        0
    );
}

/// A database written by a kernel at schema 6 keeps its rows, tables and indexes through 0007,
/// which rewrites two CHECKs in place, and its constraints are still enforced.
#[tokio::test]
async fn migration_0007_keeps_the_rows_indexes_and_constraints_of_a_schema_6_database() {
    use sqlx::sqlite::{SqliteConnectOptions, SqlitePool};
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("keel.db");
    let pool = super::migration_tests::database_at_schema(&path, 6).await;
    let rows = "INSERT INTO executions VALUES ('e1', 'a', 'blocked', '{\"t\":\"x\"}', '{}', NULL, \
         '2026-01-01T00:00:00Z', '2026-01-01T00:00:01Z', 's1', 'c1', 3); \
         INSERT INTO steps VALUES ('st1', 'e1', 'web', 'running', 1, 3, 1, 'j1', 'r1', NULL, \
         '2026-01-01T00:00:01Z'); \
         INSERT INTO events (id, execution_id, sequence, step_id, type, schema_version, \
         timestamp, payload, causation_id, correlation_id) VALUES ('ev1', 'e1', 1, NULL, \
         'execution.created', 1, '2026-01-01T00:00:00Z', '{}', 'ev1', 'ev1')";
    sqlx::raw_sql(rows).execute(&pool).await.expect("rows");
    let schema = "SELECT type, name, tbl_name FROM sqlite_master \
         WHERE name NOT LIKE 'sqlite_%' ORDER BY name";
    let before: Vec<(String, String, String)> = sqlx::query_as(schema)
        .fetch_all(&pool)
        .await
        .expect("schema");
    pool.close().await;

    let store = SqliteStore::open(&path, &StoreOptions::default())
        .await
        .expect("0007 runs");
    let after: Vec<(String, String, String)> = sqlx::query_as(schema)
        .fetch_all(store.readers())
        .await
        .expect("schema");
    // 0008 (migration_tests.rs) then adds `event_positions`, and 0009 replaces the two indexes
    // of `executions` that read `status` or `updated_at` by ones that read its phase columns.
    let renamed = [
        ("executions_status_list", "executions_phase_list"),
        ("executions_terminal_updated", "executions_finished"),
    ];
    let mut expected: Vec<(String, String, String)> = before
        .into_iter()
        .map(|(kind, name, table)| {
            let name = renamed
                .iter()
                .find(|(old, _)| *old == name)
                .map_or(name, |(_, new)| (*new).to_owned());
            (kind, name, table)
        })
        .collect();
    expected.push((
        "table".into(),
        "event_positions".into(),
        "event_positions".into(),
    ));
    expected.sort_by(|left, right| left.1.cmp(&right.1));
    // Tables of later migrations (0020's `api_keys`, ...) are not this test's concern.
    let after: Vec<(String, String, String)> = after
        .into_iter()
        .filter(|(_, _, table)| expected.iter().any(|(_, _, known)| known == table))
        .collect();
    assert_eq!(after, expected, "the same tables and indexes");
    let execution: (String, String, Option<String>, i64) =
        sqlx::query_as("SELECT id, status, labels, last_sequence FROM executions")
            .fetch_one(store.readers())
            .await
            .expect("execution");
    assert_eq!(
        execution,
        (
            "e1".into(),
            "blocked".into(),
            Some("{\"t\":\"x\"}".into()),
            3
        )
    );
    let step: (String, String, i64, Option<String>) =
        sqlx::query_as("SELECT id, status, remote, runner_id FROM steps")
            .fetch_one(store.readers())
            .await
            .expect("step");
    assert_eq!(step, ("st1".into(), "running".into(), 1, Some("r1".into())));
    assert_eq!(temporary_btrees(&store, UPSERT_STEP).await, 0);

    let pool = SqlitePool::connect_with(SqliteConnectOptions::new().filename(&path))
        .await
        .expect("pool");
    let dangling: Vec<(String,)> = sqlx::query_as("SELECT \"table\" FROM pragma_foreign_key_check")
        .fetch_all(&pool)
        .await
        .expect("check");
    assert!(dangling.is_empty(), "{dangling:?}");
    let integrity: String = sqlx::query_scalar("PRAGMA integrity_check")
        .fetch_one(&pool)
        .await
        .expect("integrity check");
    assert_eq!(integrity, "ok");
    let bad_status = sqlx::query("UPDATE executions SET status = 'lost' WHERE id = 'e1'")
        .execute(&pool)
        .await;
    assert!(bad_status.is_err(), "the status CHECK still holds");
    let orphan = sqlx::query(
        "INSERT INTO steps VALUES ('st2', 'nobody', 'web', 'pending', 1, 1, 0, NULL, NULL, \
         NULL, 'x')",
    )
    .execute(&pool)
    .await;
    assert!(orphan.is_err(), "the foreign key still holds");
}

/// Counts the instructions of a statement's program that stop it with `ABORT` (`Halt` or
/// `HaltIfNull` with P2 = 2, SQLite's `OE_Abort`). A program that writes several rows and has
/// any of them is run with a statement journal.
async fn aborting_halts(store: &SqliteStore, sql: &str) -> usize {
    program(store, sql)
        .await
        .iter()
        .filter(|(op, p2)| (op == "Halt" || op == "HaltIfNull") && *p2 == 2)
        .count()
}

/// The multi-row event inserts (`event_rows.rs`) never stop with `ABORT`, so SQLite keeps no
/// statement journal for them (at C=64 it spilled to a temporary file). The step upsert, whose
/// `DO UPDATE` does, shows that the count sees an `ABORT` where there is one.
#[tokio::test]
async fn the_multi_row_statements_keep_no_statement_journal() {
    let (_dir, store) = fresh().await;
    assert!(aborting_halts(&store, UPSERT_STEP).await > 0, "steps");
    for index in (0..ROWS.len()).filter(|&index| ROWS[index] > 1) {
        let sql = sql(index).expect("a statement");
        assert_eq!(aborting_halts(&store, sql).await, 0, "{} rows", ROWS[index]);
    }
}
