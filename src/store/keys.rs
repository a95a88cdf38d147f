//! API keys (`Store::api_keys`, `Store::put_api_keys`) for both backends: one row per key, its
//! record kept as JSON text (migration 0020).

use rusqlite::{Connection, params};
use sqlx::{PgPool, SqlitePool};

use keel_actors::error::StoreError;
use keel_actors::store::StoredKey;
use keel_actors::time;

use super::map_sqlx_error;

/// Reads every key.
const SELECT_KEYS: &str = "SELECT public_id, name, record FROM api_keys ORDER BY name";

/// Upserts one key (both backends take this syntax).
const UPSERT_KEY: &str = "INSERT INTO api_keys (public_id, name, record, updated_at) \
     VALUES ({id}, {name}, {record}, {now}) \
     ON CONFLICT (public_id) DO UPDATE SET name = excluded.name, record = excluded.record, \
     updated_at = excluded.updated_at";

fn decode(rows: Vec<(String, String, String)>) -> Result<Vec<StoredKey>, StoreError> {
    rows.into_iter()
        .map(|(public_id, name, record)| {
            let record = serde_json::from_str(&record).map_err(|error| {
                StoreError::Internal(format!("api key {name}: undecodable record: {error}"))
            })?;
            Ok(StoredKey {
                public_id,
                name,
                record,
            })
        })
        .collect()
}

/// SQLite: every key.
pub(super) async fn sqlite_keys(readers: &SqlitePool) -> Result<Vec<StoredKey>, StoreError> {
    let rows: Vec<(String, String, String)> = sqlx::query_as(SELECT_KEYS)
        .fetch_all(readers)
        .await
        .map_err(map_sqlx_error)?;
    decode(rows)
}

/// PostgreSQL: every key.
pub(super) async fn postgres_keys(readers: &PgPool) -> Result<Vec<StoredKey>, StoreError> {
    let rows: Vec<(String, String, String)> = sqlx::query_as(SELECT_KEYS)
        .fetch_all(readers)
        .await
        .map_err(map_sqlx_error)?;
    decode(rows)
}

/// SQLite (the writer thread, inside its transaction): upserts `keys`.
pub(super) fn sqlite_put_keys(
    connection: &Connection,
    keys: &[StoredKey],
) -> Result<(), StoreError> {
    let sql = UPSERT_KEY
        .replace("{id}", "?1")
        .replace("{name}", "?2")
        .replace("{record}", "?3")
        .replace("{now}", "?4");
    let now = time::format(&time::now());
    let mut statement = connection
        .prepare_cached(&sql)
        .map_err(super::sqlite::map_rusqlite_error)?;
    for key in keys {
        statement
            .execute(params![
                key.public_id,
                key.name,
                key.record.to_string(),
                now
            ])
            .map_err(super::sqlite::map_rusqlite_error)?;
    }
    Ok(())
}

/// PostgreSQL: upserts `keys` in one transaction on the writer connection.
pub(super) async fn postgres_put_keys(
    connection: &mut sqlx::PgConnection,
    keys: &[StoredKey],
) -> Result<(), StoreError> {
    use sqlx::Connection as _;
    let sql = UPSERT_KEY
        .replace("{id}", "$1")
        .replace("{name}", "$2")
        .replace("{record}", "$3")
        .replace("{now}", "now()");
    let mut transaction = connection.begin().await.map_err(map_sqlx_error)?;
    for key in keys {
        sqlx::query(&sql)
            .bind(&key.public_id)
            .bind(&key.name)
            .bind(key.record.to_string())
            .execute(&mut *transaction)
            .await
            .map_err(map_sqlx_error)?;
    }
    transaction.commit().await.map_err(map_sqlx_error)
}
