//! The writer connection's plan of the group-commit statement on a new database reads
//! `executions` through its primary key, never by a sequential scan (`schema::writer_settings`).
//! PostgreSQL caches a generic plan for the statement; made while `executions` is empty, it was
//! a hash join over a sequential scan, kept for the connection's life as the table grew.
//! Skips (and passes) without `KEEL_TEST_POSTGRES_URL`.

use sqlx::{Connection, PgConnection};

use super::super::StoreOptions;
use super::round_sql::WRITE_ROUND;
use super::{PostgresStore, test_db};

/// The generic plan of the group-commit statement on `connection`, as text.
async fn generic_plan(connection: &mut PgConnection) -> String {
    sqlx::raw_sql("SET plan_cache_mode = force_generic_plan")
        .execute(&mut *connection)
        .await
        .expect("set");
    sqlx::raw_sql(&format!("PREPARE keel_round AS {WRITE_ROUND}"))
        .execute(&mut *connection)
        .await
        .expect("prepare");
    let nulls = vec!["NULL"; parameters(WRITE_ROUND)].join(", ");
    let lines: Vec<String> = sqlx::query_scalar(&format!("EXPLAIN EXECUTE keel_round({nulls})"))
        .fetch_all(&mut *connection)
        .await
        .expect("explain");
    lines.join("\n")
}

/// The number of parameters of `statement`: its highest `$N`.
fn parameters(statement: &str) -> usize {
    statement
        .split('$')
        .skip(1)
        .filter_map(|rest| {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse::<usize>().ok()
        })
        .max()
        .unwrap_or(0)
}

#[tokio::test]
async fn the_writer_plans_its_commits_on_an_empty_database_without_scanning_executions() {
    let Some(db) = test_db::fresh().await else {
        return;
    };
    let store = PostgresStore::open(&db.url, &StoreOptions::default())
        .await
        .expect("open");
    let mut checkout = store.writer.checkout().await.expect("writer");
    let plan = generic_plan(checkout.connection()).await;
    checkout.finish(Ok(())).expect("finish");
    assert!(!plan.contains("Seq Scan on executions"), "{plan}");
    assert!(plan.contains("executions_pkey"), "{plan}");

    // The same statement on a connection with the default settings: the scan this rules out.
    let mut plain = PgConnection::connect(&db.url).await.expect("connect");
    let default_plan = generic_plan(&mut plain).await;
    assert!(
        default_plan.contains("Seq Scan on executions"),
        "{default_plan}"
    );
}
