//! The schema version of a SQLite file, read before migrating it.

use sqlx::SqliteConnection;

use keel_actors::error::StoreError;

use super::map_sqlx_error;

/// Returns the newest migration version applied to the database, if it was ever migrated.
pub(super) async fn applied_version(
    connection: &mut SqliteConnection,
) -> Result<Option<i64>, StoreError> {
    let table = sqlx::query_scalar::<_, String>(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations'",
    )
    .fetch_optional(&mut *connection)
    .await
    .map_err(map_sqlx_error)?;
    if table.is_none() {
        return Ok(None);
    }
    sqlx::query_scalar::<_, Option<i64>>("SELECT MAX(version) FROM _sqlx_migrations")
        .fetch_one(&mut *connection)
        .await
        .map_err(map_sqlx_error)
}
