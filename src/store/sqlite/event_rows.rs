//! The events of a transaction written with multi-row `INSERT`s, up to [`ROWS`] rows each.
//! Every `INSERT` into `events` reads and rewrites its `sqlite_sequence` row (the table is
//! `AUTOINCREMENT`) and opens, seeks and closes a cursor per index; one statement for many rows
//! pays that once. The rows keep the order they are given in, so positions are assigned as
//! row-by-row inserts would assign them.

use std::sync::LazyLock;

use rusqlite::Connection;

use keel_actors::error::StoreError;
use keel_actors::events::Event;
use keel_actors::time;

use super::super::rows::encode_payload;
use super::write::map_rusqlite_error;

/// Most rows per statement (11 parameters each).
pub(super) const ROWS: usize = 16;

const COLUMNS: usize = 11;

/// `SQL[n - 1]` inserts `n` rows.
static SQL: LazyLock<Vec<String>> = LazyLock::new(|| {
    let row = format!("({})", vec!["?"; COLUMNS].join(", "));
    (1..=ROWS)
        .map(|rows| {
            format!(
                "INSERT INTO events (id, execution_id, sequence, step_id, type, schema_version, \
                 timestamp, payload, causation_id, correlation_id, idempotency_key) VALUES {}",
                vec![row.as_str(); rows].join(", ")
            )
        })
        .collect()
});

/// Returns the statement inserting `rows` events (1 to [`ROWS`]).
pub(super) fn sql(rows: usize) -> &'static str {
    &SQL[rows.clamp(1, ROWS) - 1]
}

/// Inserts `events` (each with its execution's id), in order.
pub(super) fn insert(connection: &Connection, events: &[(&str, &Event)]) -> Result<(), StoreError> {
    for chunk in events.chunks(ROWS) {
        let mut statement = connection
            .prepare_cached(sql(chunk.len()))
            .map_err(map_rusqlite_error)?;
        let mut index = 0;
        let mut bind = |value: &dyn rusqlite::ToSql| {
            index += 1;
            statement.raw_bind_parameter(index, value)
        };
        for (execution_id, event) in chunk {
            let timestamp = time::format(&event.timestamp);
            let payload = encode_payload(&event.body)?;
            (|| {
                bind(&event.id)?;
                bind(execution_id)?;
                bind(&event.sequence)?;
                bind(&event.step_id.as_ref().map(|step| step.as_str()))?;
                bind(&event.body.type_name())?;
                bind(&event.schema_version)?;
                bind(&timestamp)?;
                bind(&payload)?;
                bind(&event.causation_id)?;
                bind(&event.correlation_id)?;
                bind(&event.idempotency_key)
            })()
            .map_err(map_rusqlite_error)?;
        }
        statement.raw_execute().map_err(map_rusqlite_error)?;
    }
    Ok(())
}
