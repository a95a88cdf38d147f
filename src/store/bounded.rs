//! Reads bounded by bytes as well as by count, shared in shape by both backends
//! (`Store::events_within` and `Store::feed`; see `keel_actors::store::Batch`).
//!
//! The query first picks the next `limit` rows by their key alone, with each one's stored
//! payload size (`octet_length`) and the running total through it (a window over those rows
//! only), then joins back to `events` for the rows whose predecessors stay under the budget:
//! the payloads it leaves out are measured by the database, never loaded by the kernel.

use sqlx::QueryBuilder;

use keel_actors::error::StoreError;
use keel_actors::events::Event;
use keel_actors::ids::ExecutionId;
use keel_actors::store::Batch;

use super::rows::EventRecord;

/// How a backend measures the stored payload of the events row aliased `alias` in bytes.
#[derive(Clone, Copy, Debug)]
pub(super) enum PayloadSize {
    /// SQLite: `payload` is UTF-8 text.
    Sqlite,
    /// PostgreSQL: `payload` is `json`, measured as its text.
    Postgres,
}

impl PayloadSize {
    /// The SQL expression of the size of `alias.payload`.
    pub(super) fn of(self, alias: &str) -> String {
        match self {
            Self::Sqlite => format!("octet_length({alias}.payload)"),
            Self::Postgres => format!("octet_length({alias}.payload::text)"),
        }
    }
}

/// Opens the running-total window: `SELECT w_key, w_size{others}, <total> AS through_bytes
/// FROM (SELECT ` — the caller writes the picking select (its columns aliased `w_key`, `w_size`
/// and `others`, ordered by `w_key` and limited), then [`CLOSE_WINDOW`].
pub(super) fn open_window(others: &str) -> String {
    format!(
        "SELECT w_key, w_size{others}, SUM(w_size) OVER (ORDER BY w_key ROWS UNBOUNDED PRECEDING) \
         AS through_bytes FROM (SELECT "
    )
}

/// Closes [`open_window`]: the window is then the relation `w`.
pub(super) const CLOSE_WINDOW: &str = ") AS c) AS w";

/// One event row with the running total of payload bytes through it.
#[derive(sqlx::FromRow)]
pub(super) struct SizedEvent {
    #[sqlx(flatten)]
    event: EventRecord,
    through_bytes: i64,
}

/// Builds the query of `Store::events_within` with `event_columns` (the backend's rendering).
pub(super) fn events_query<'q, DB: sqlx::Database>(
    event_columns: &str,
    size: PayloadSize,
    id: &'q ExecutionId,
    after_sequence: i64,
    limit: i64,
    max_bytes: i64,
) -> QueryBuilder<'q, DB>
where
    i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    let mut builder = QueryBuilder::<DB>::new(format!(
        "SELECT {event_columns}, w.through_bytes FROM ({}p.sequence AS w_key, {} AS w_size \
         FROM events AS p",
        open_window(""),
        size.of("p")
    ));
    builder
        .push(" WHERE p.execution_id = ")
        .push_bind(id.as_str())
        .push(" AND p.sequence > ")
        .push_bind(after_sequence)
        .push(" ORDER BY p.sequence LIMIT ")
        .push_bind(limit.max(0))
        .push(CLOSE_WINDOW)
        .push(" JOIN events ON events.execution_id = ")
        .push_bind(id.as_str())
        .push(" AND events.sequence = w.w_key WHERE w.through_bytes - w.w_size < ")
        .push_bind(max_bytes.max(1))
        .push(" ORDER BY w.w_key");
    builder
}

/// Converts the rows of [`events_query`] into the batch.
pub(super) fn events_batch(
    rows: Vec<SizedEvent>,
    limit: i64,
    max_bytes: i64,
) -> Result<Batch<Event>, StoreError> {
    let sized = rows
        .into_iter()
        .map(|row| Ok((row.event.into_event()?, row.through_bytes)))
        .collect::<Result<Vec<_>, StoreError>>()?;
    Ok(Batch::within(sized, limit, max_bytes.max(1)))
}
