//! The adapter's own reads of events, executions and the recovery index (the feature reads, shared in shape with
//! SQLite, live beside the store module: `feed.rs`, `overview.rs`, ...). Values PostgreSQL text
//! cannot hold (NUL) match nothing instead of failing the query.

use sqlx::{Postgres, QueryBuilder};

use keel_actors::error::StoreError;
use keel_actors::events::Event;
use keel_actors::ids::{AgentId, ExecutionId};
use keel_actors::store::{Batch, ExecutionRow, ListFilter, RecoveryEntry};
use keel_actors::time;

use super::super::PG_NON_TERMINAL;
use super::super::bounded::{PayloadSize, SizedEvent, events_batch, events_query};
use super::super::recovery::{self, RecoveryRecord};
use super::super::rows::{EventRecord, ExecutionRecord};
use super::PostgresStore;
use super::schema::{EVENT_COLUMNS, EXECUTION_COLUMNS, RECOVERY_CREATED_AT};

impl PostgresStore {
    /// Events of one execution after a sequence, in order (`Store::events`).
    pub(super) async fn read_events(
        &self,
        id: &ExecutionId,
        after_sequence: i64,
        limit: i64,
    ) -> Result<Vec<Event>, StoreError> {
        if !storable(id.as_str()) {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM events \
             WHERE execution_id = $1 AND sequence > $2 ORDER BY sequence LIMIT $3"
        );
        let records = self
            .bounded(
                sqlx::query_as::<_, EventRecord>(&sql)
                    .bind(id.as_str())
                    .bind(after_sequence)
                    .bind(limit.max(0))
                    .fetch_all(&self.readers),
            )
            .await?;
        records.into_iter().map(EventRecord::into_event).collect()
    }

    /// Events of one execution after a sequence, within a byte budget
    /// (`Store::events_within`).
    pub(super) async fn read_events_within(
        &self,
        id: &ExecutionId,
        after_sequence: i64,
        limit: i64,
        max_bytes: i64,
    ) -> Result<Batch<Event>, StoreError> {
        if !storable(id.as_str()) {
            return Ok(Batch {
                items: Vec::new(),
                full: false,
            });
        }
        let mut builder = events_query::<Postgres>(
            EVENT_COLUMNS,
            PayloadSize::Postgres,
            id,
            after_sequence,
            limit,
            max_bytes,
        );
        let rows = self
            .bounded(
                builder
                    .build_query_as::<SizedEvent>()
                    .fetch_all(&self.readers),
            )
            .await?;
        events_batch(rows, limit, max_bytes)
    }

    /// Every execution that is not terminal, as startup recovery needs it
    /// (`Store::recovery_index`), or only those of `partitions` (`Store::recovery_index_of`,
    /// cluster mode).
    pub(super) async fn read_recovery_index(
        &self,
        partitions: Option<&[u32]>,
    ) -> Result<Vec<RecoveryEntry>, StoreError> {
        let open = match partitions {
            None => format!("e.{PG_NON_TERMINAL}"),
            // Matches the predicate of `executions_open_by_partition` (migration 0011).
            Some(_) => {
                format!("e.partition = ANY($1) AND e.partition IS NOT NULL AND e.{PG_NON_TERMINAL}")
            }
        };
        let sql = recovery::query(RECOVERY_CREATED_AT, &open, "");
        let mut query = sqlx::query_as::<_, RecoveryRecord>(&sql);
        if let Some(partitions) = partitions {
            let ids: Vec<i32> = partitions
                .iter()
                .filter_map(|id| i32::try_from(*id).ok())
                .collect();
            query = query.bind(ids);
        }
        let records = self.bounded(query.fetch_all(&self.readers)).await?;
        records
            .into_iter()
            .map(|record| record.into_entry())
            .collect()
    }

    /// One execution's projection row (`Store::execution`).
    pub(super) async fn read_execution(
        &self,
        id: &ExecutionId,
    ) -> Result<Option<ExecutionRow>, StoreError> {
        if !storable(id.as_str()) {
            return Ok(None);
        }
        let sql = format!("SELECT {EXECUTION_COLUMNS} FROM executions WHERE id = $1");
        let record = self
            .bounded(
                sqlx::query_as::<_, ExecutionRecord>(&sql)
                    .bind(id.as_str())
                    .fetch_optional(&self.readers),
            )
            .await?;
        record.map(ExecutionRecord::into_row).transpose()
    }

    /// A filtered page of executions, newest first (`Store::list_executions`).
    pub(super) async fn read_list(
        &self,
        filter: &ListFilter,
    ) -> Result<Vec<ExecutionRow>, StoreError> {
        let texts = filter
            .agent_id
            .iter()
            .map(AgentId::as_str)
            .chain(
                filter
                    .labels
                    .iter()
                    .flat_map(|(key, value)| [key.as_str(), value.as_str()]),
            )
            .chain(filter.after.iter().map(|(_, id)| id.as_str()));
        if texts.into_iter().any(|text| !storable(text)) {
            return Ok(Vec::new());
        }
        let mut query = QueryBuilder::<Postgres>::new(format!(
            "SELECT {EXECUTION_COLUMNS} FROM executions AS e WHERE TRUE"
        ));
        if let Some(status) = filter.status {
            // The phase reaches the index (migration 0007); the status picks within it.
            query
                .push(" AND e.phase = ")
                .push_bind(super::super::phase(status))
                .push(" AND e.status = ")
                .push_bind(status.as_str());
        }
        super::super::filter::push_agent_and_labels(&mut query, filter);
        if let Some((created_at, id)) = &filter.after {
            // Strictly after (created_at, id) in descending order, as a row comparison the
            // (created_at DESC, id DESC) indexes answer directly.
            query
                .push(" AND (e.created_at, e.id) < (")
                .push_bind(time::format(created_at))
                .push("::timestamptz, ")
                .push_bind(id.as_str())
                .push(")");
        }
        query
            .push(" ORDER BY e.created_at DESC, e.id DESC LIMIT ")
            .push_bind(filter.limit.max(0));
        let records = self
            .bounded(
                query
                    .build_query_as::<ExecutionRecord>()
                    .fetch_all(&self.readers),
            )
            .await?;
        records.into_iter().map(ExecutionRecord::into_row).collect()
    }
}

/// Returns whether a filter value can match stored text: PostgreSQL text never holds NUL, and
/// sending one fails the query instead of matching nothing.
pub(super) fn storable(text: &str) -> bool {
    !text.contains('\0')
}
