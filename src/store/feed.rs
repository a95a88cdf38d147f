//! The kernel-wide feed (`Store::feed`, `Store::head_position`) and the webhook subscriptions'
//! acknowledged positions (`Store::webhook_positions`, `Store::set_webhook_position`) for both
//! backends. The feed reads `events` in `position` order joined to the execution row for the
//! agent and label filters; the primary key on `position` serves the scan.
//!
//! Commit order. SQLite and a one-kernel PostgreSQL database have one writer, so positions (a
//! sequence) become visible in increasing order. Cluster kernels write concurrently, so a
//! sequence value taken before commit could become visible after a reader passed it. There a
//! position is the writing transaction's id shifted left by [`TRANSACTION_BITS`] plus the
//! event's rank in the transaction (`super::postgres::write`), and the feed reads only below
//! the *horizon*: the oldest transaction id still running, shifted the same way
//! (`pg_snapshot_xmin` of the statement's own snapshot). Every event below the horizon is
//! committed (or rolled back) and visible to the read; every event that commits later belongs
//! to a transaction at or above it. So a reader's cursor never passes an event that commits
//! later, and cursors stay plain integers (older positions, written before the database became
//! a cluster database, are smaller than every transaction-based one). The cost: the feed waits
//! for the oldest write transaction running on the server (a few milliseconds for group
//! commits; as long as any other write transaction on the same server stays open).

use sqlx::{PgPool, QueryBuilder, SqlitePool};

use keel_actors::error::StoreError;
use keel_actors::feed::{FeedEvent, FeedQuery};
use keel_actors::ids::AgentId;
use keel_actors::store::Batch;

use super::bounded::{CLOSE_WINDOW, PayloadSize, open_window};
use super::map_sqlx_error;
use super::rows::EventRecord;

/// Upserts one subscription's acknowledged position (both backends take this syntax).
pub(super) const UPSERT_WEBHOOK_POSITION: &str = "INSERT INTO webhook_positions \
     (subscription_id, position, updated_at) VALUES ({id}, {position}, {now}) \
     ON CONFLICT (subscription_id) DO UPDATE SET position = excluded.position, \
     updated_at = excluded.updated_at";

/// Reads every acknowledged position.
const SELECT_WEBHOOK_POSITIONS: &str =
    "SELECT subscription_id, position FROM webhook_positions ORDER BY subscription_id";

/// Reads the newest position.
const SELECT_HEAD: &str = "SELECT COALESCE(MAX(position), 0) FROM events";

/// Bits of a cluster-mode position below the transaction id (see the module documentation).
pub(super) const TRANSACTION_BITS: u32 = 20;

/// The horizon of cluster mode: positions below it are all committed or rolled back, in the
/// snapshot of the statement that evaluates it.
const HORIZON: &str = "(pg_snapshot_xmin(pg_current_snapshot())::text::int8 << 20)";

/// Where a feed read may see events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Visibility {
    /// One writer: every committed event.
    All,
    /// Cluster mode: only events below the horizon.
    BelowHorizon,
}

/// One row of the feed query, with the running total of payload bytes through it.
#[derive(sqlx::FromRow)]
pub(super) struct FeedRecord {
    position: i64,
    agent_id: String,
    #[sqlx(flatten)]
    event: EventRecord,
    through_bytes: i64,
}

/// The byte budget of a feed query (none: every row within the count).
fn budget(query: &FeedQuery) -> i64 {
    query.max_bytes.map_or(i64::MAX, |bytes| bytes.max(1))
}

/// Builds the feed query with `event_columns` (the backend's rendering of the event columns):
/// the next `limit` positions that pass the filters are picked with their payload sizes, and
/// the events are read for those within the byte budget (`super::bounded`).
fn build<'q, DB: sqlx::Database>(
    event_columns: &str,
    size: PayloadSize,
    query: &'q FeedQuery,
    visibility: Visibility,
) -> QueryBuilder<'q, DB>
where
    i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    let mut builder = QueryBuilder::<DB>::new(format!(
        "SELECT position, w.agent_id AS agent_id, {event_columns}, w.through_bytes FROM \
         ({}e.position AS w_key, x.agent_id AS agent_id, {} AS w_size \
         FROM events AS e JOIN executions AS x ON x.id = e.execution_id WHERE e.position > ",
        open_window(", agent_id"),
        size.of("e")
    ));
    builder.push_bind(query.after_position);
    if visibility == Visibility::BelowHorizon {
        builder.push(format!(" AND e.position < {HORIZON}"));
    }
    if let Some(agent_id) = &query.agent_id {
        builder
            .push(" AND x.agent_id = ")
            .push_bind(agent_id.as_str());
    }
    if let Some(execution_id) = &query.execution_id {
        builder
            .push(" AND e.execution_id = ")
            .push_bind(execution_id.as_str());
    }
    for (key, value) in &query.labels {
        builder
            .push(" AND EXISTS (SELECT 1 FROM execution_labels AS l WHERE l.execution_id = e.execution_id AND l.key = ")
            .push_bind(key.as_str())
            .push(" AND l.value = ")
            .push_bind(value.as_str())
            .push(")");
    }
    builder
        .push(" ORDER BY e.position LIMIT ")
        .push_bind(query.limit.max(0))
        .push(CLOSE_WINDOW)
        .push(" JOIN events ON events.position = w.w_key WHERE w.through_bytes - w.w_size < ")
        .push_bind(budget(query))
        .push(" ORDER BY w.w_key");
    builder
}

/// Converts the rows of a feed query into its batch.
fn into_batch(records: Vec<FeedRecord>, query: &FeedQuery) -> Result<Batch<FeedEvent>, StoreError> {
    let sized = records
        .into_iter()
        .map(|record| {
            let through = record.through_bytes;
            let event = FeedEvent {
                position: record.position,
                agent_id: AgentId::new(record.agent_id),
                event: record.event.into_event()?,
            };
            Ok((event, through))
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    Ok(Batch::within(sized, query.limit, budget(query)))
}

/// `Store::feed` on SQLite.
pub(super) async fn sqlite_feed(
    readers: &SqlitePool,
    event_columns: &str,
    query: &FeedQuery,
) -> Result<Batch<FeedEvent>, StoreError> {
    let mut builder =
        build::<sqlx::Sqlite>(event_columns, PayloadSize::Sqlite, query, Visibility::All);
    let records = builder
        .build_query_as::<FeedRecord>()
        .fetch_all(readers)
        .await
        .map_err(map_sqlx_error)?;
    into_batch(records, query)
}

/// `Store::head_position` on SQLite.
pub(super) async fn sqlite_head(readers: &SqlitePool) -> Result<i64, StoreError> {
    sqlx::query_scalar::<_, i64>(SELECT_HEAD)
        .fetch_one(readers)
        .await
        .map_err(map_sqlx_error)
}

/// `Store::webhook_positions` on SQLite.
pub(super) async fn sqlite_webhook_positions(
    readers: &SqlitePool,
) -> Result<Vec<(String, i64)>, StoreError> {
    sqlx::query_as::<_, (String, i64)>(SELECT_WEBHOOK_POSITIONS)
        .fetch_all(readers)
        .await
        .map_err(map_sqlx_error)
}

/// Rows of `Store::feed` on PostgreSQL (the caller bounds the read in time and converts them
/// with [`postgres_events`]).
pub(super) async fn postgres_feed(
    readers: &PgPool,
    event_columns: &str,
    query: &FeedQuery,
    visibility: Visibility,
) -> Result<Vec<FeedRecord>, sqlx::Error> {
    let mut builder =
        build::<sqlx::Postgres>(event_columns, PayloadSize::Postgres, query, visibility);
    builder
        .build_query_as::<FeedRecord>()
        .fetch_all(readers)
        .await
}

/// Converts the rows read by [`postgres_feed`].
pub(super) fn postgres_events(
    records: Vec<FeedRecord>,
    query: &FeedQuery,
) -> Result<Batch<FeedEvent>, StoreError> {
    into_batch(records, query)
}

/// `Store::head_position` on PostgreSQL.
pub(super) async fn postgres_head(
    readers: &PgPool,
    visibility: Visibility,
) -> Result<i64, sqlx::Error> {
    let sql = match visibility {
        Visibility::All => SELECT_HEAD.to_owned(),
        Visibility::BelowHorizon => format!("{SELECT_HEAD} WHERE position < {HORIZON}"),
    };
    sqlx::query_scalar::<_, i64>(&sql).fetch_one(readers).await
}

/// `Store::webhook_positions` on PostgreSQL.
pub(super) async fn postgres_webhook_positions(
    readers: &PgPool,
) -> Result<Vec<(String, i64)>, sqlx::Error> {
    sqlx::query_as::<_, (String, i64)>(SELECT_WEBHOOK_POSITIONS)
        .fetch_all(readers)
        .await
}

/// `Store::set_webhook_position` on PostgreSQL, on the writer connection.
pub(super) async fn postgres_set_webhook_position(
    connection: &mut sqlx::PgConnection,
    id: &str,
    position: i64,
) -> Result<(), StoreError> {
    let sql = UPSERT_WEBHOOK_POSITION
        .replace("{id}", "$1")
        .replace("{position}", "$2")
        .replace("{now}", "now()");
    sqlx::query(&sql)
        .bind(id)
        .bind(position)
        .execute(connection)
        .await
        .map_err(map_sqlx_error)?;
    Ok(())
}
