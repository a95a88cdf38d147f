//! Retention on PostgreSQL: deleting old terminal executions with all their rows, on the
//! writer connection (`Store::delete_terminal_before`).

use sqlx::Connection;
use sqlx::postgres::PgConnection;

use keel_actors::error::StoreError;
use keel_actors::time::{self, Timestamp};

use super::super::map_sqlx_error;
use super::{PostgresStore, SINGLETON_PARTITION};

impl PostgresStore {
    /// `Store::delete_terminal_before`.
    pub(super) async fn retain(&self, before: Timestamp, limit: i64) -> Result<u64, StoreError> {
        // Cluster mode: retention is singleton work, done by the kernel holding partition 0
        // (docs/architecture.md, "Cluster"); the others delete nothing.
        if let Some(fence) = &self.fence
            && fence.epoch(SINGLETON_PARTITION).is_none()
        {
            return Ok(0);
        }
        let mut checkout = self.writer.checkout().await?;
        let outcome = self
            .writer
            .bounded(delete_terminal_before(
                checkout.connection(),
                &time::format(&before),
                limit.max(0),
            ))
            .await;
        checkout.finish(outcome)
    }
}

/// Deletes up to `limit` terminal executions last updated before `before` (RFC 3339), oldest
/// first, with all their rows, in one transaction; returns how many were deleted.
pub(super) async fn delete_terminal_before(
    connection: &mut PgConnection,
    before: &str,
    limit: i64,
) -> Result<u64, StoreError> {
    // `finished_at` is `updated_at` once terminal (migration 0007), over `executions_finished`.
    let select = "SELECT id FROM executions WHERE finished_at IS NOT NULL \
         AND finished_at < $1::timestamptz ORDER BY finished_at, id LIMIT $2";
    let mut transaction = connection.begin().await.map_err(map_sqlx_error)?;
    let ids = sqlx::query_scalar::<_, String>(select)
        .bind(before)
        .bind(limit)
        .fetch_all(&mut *transaction)
        .await
        .map_err(map_sqlx_error)?;
    if ids.is_empty() {
        transaction.rollback().await.map_err(map_sqlx_error)?;
        return Ok(0);
    }
    // Children first: the foreign keys point at `executions`.
    let deletes = [
        "DELETE FROM events WHERE execution_id = ANY($1)",
        "DELETE FROM execution_labels WHERE execution_id = ANY($1)",
        "DELETE FROM steps WHERE execution_id = ANY($1)",
        "DELETE FROM executions WHERE id = ANY($1)",
    ];
    for delete in deletes {
        sqlx::query(delete)
            .bind(&ids)
            .execute(&mut *transaction)
            .await
            .map_err(map_sqlx_error)?;
    }
    transaction.commit().await.map_err(map_sqlx_error)?;
    Ok(ids.len() as u64)
}
