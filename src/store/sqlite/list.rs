//! SQLite: the filtered, paged execution list (`GET /v0/executions`).

use sqlx::{QueryBuilder, Sqlite, SqlitePool};

use keel_actors::error::StoreError;
use keel_actors::store::{ExecutionRow, ListFilter};
use keel_actors::time;

use super::super::map_sqlx_error;
use super::super::rows::{EXECUTION_COLUMNS, ExecutionRecord};

/// Lists executions newest first, by status, agent and labels, after a cursor.
pub(super) async fn list_executions(
    readers: &SqlitePool,
    filter: &ListFilter,
) -> Result<Vec<ExecutionRow>, StoreError> {
    let mut query = QueryBuilder::<Sqlite>::new(format!(
        "SELECT {EXECUTION_COLUMNS} FROM executions AS e WHERE 1 = 1"
    ));
    if let Some(status) = filter.status {
        // The phase reaches the index (migration 0009); the status picks within it.
        query
            .push(" AND e.phase = ")
            .push_bind(super::super::phase(status))
            .push(" AND e.status = ")
            .push_bind(status.as_str());
    }
    super::super::filter::push_agent_and_labels(&mut query, filter);
    if let Some((created_at, id)) = &filter.after {
        // Strictly after (created_at, id) in descending order; written so that the
        // created_at range alone can drive the index.
        let created_at = time::format(created_at);
        query
            .push(" AND e.created_at <= ")
            .push_bind(created_at.clone())
            .push(" AND (e.created_at < ")
            .push_bind(created_at)
            .push(" OR e.id < ")
            .push_bind(id.as_str())
            .push(")");
    }
    query
        .push(" ORDER BY e.created_at DESC, e.id DESC LIMIT ")
        .push_bind(filter.limit.max(0));
    let records = query
        .build_query_as::<ExecutionRecord>()
        .fetch_all(readers)
        .await
        .map_err(map_sqlx_error)?;
    records.into_iter().map(ExecutionRecord::into_row).collect()
}
