//! The schema version of a PostgreSQL database, read before migrating it.

use sqlx::PgConnection;

use keel_actors::error::StoreError;

use super::map_sqlx_error;

/// Returns the newest migration version applied to the database, if it was ever migrated.
pub(super) async fn applied_version(
    connection: &mut PgConnection,
) -> Result<Option<i64>, StoreError> {
    let table =
        sqlx::query_scalar::<_, Option<String>>("SELECT to_regclass('_sqlx_migrations')::text")
            .fetch_one(&mut *connection)
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
