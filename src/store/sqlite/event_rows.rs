//! The events of a whole write transaction, inserted with multi-row statements.
//!
//! Under load one transaction carries the commits of many executions, about two events per
//! commit. Inserted one statement per event, each row paid for a statement's fixed work as well
//! as its own: the program's start, a cursor on the table and each of its four indexes opened
//! and closed, the statement's halt and reset. Here the writer writes each commit's other rows
//! as it goes through the commits, collects the events of those that pass, and then inserts
//! them in as few statements as the sizes in [`ROWS`] add up to (29 events: 16 + 8 + 4 + 1).
//!
//! The statements are `INSERT OR FAIL`. SQLite gives a statement that writes several rows and
//! may stop at a constraint with `ABORT` (the default) a statement journal, a copy of each page
//! it changes so that it can undo that statement alone. A 32-row insert, whose index entries
//! fall on many pages, outgrew the 64 KiB of it kept in memory and spilled it to a temporary
//! file, an `open` and `unlink` each time; that is why an earlier attempt at multi-row inserts
//! was slower at C=64 (docs/benchmarks.md). `FAIL` stops the statement where it is without
//! undoing it, so no journal is kept, and none is needed: a failure rolls the whole
//! transaction back (`write_plan_tests.rs` checks the programs). Steps stay one upsert per row:
//! the `DO UPDATE` of an upsert checks its constraints with `ABORT` whatever the `INSERT` says.
//!
//! Positions are handed out as the events are collected, in the group's order, and the rows
//! are inserted in that order. A statement of many commits' events cannot say which commit's
//! event broke a constraint (a reused creation idempotency key), so when one fails
//! `write::commit_group` rolls the transaction back and writes the group again, inserting each
//! commit's events right after its other rows, which finds it.

use std::sync::LazyLock;

use rusqlite::ToSql;

use keel_actors::error::StoreError;

use super::statements::Statements;
use super::write::map_rusqlite_error;

/// Row counts of the multi-row statements, largest first.
pub(super) const ROWS: [usize; 6] = [32, 16, 8, 4, 2, 1];

/// Columns of one event row.
const COLUMNS: usize = 13;

/// The statement inserting `ROWS[index]` events.
pub(super) fn sql(index: usize) -> Option<&'static str> {
    STATEMENTS.get(index).map(String::as_str)
}

/// The statements, by index into `ROWS`.
static STATEMENTS: LazyLock<[String; ROWS.len()]> = LazyLock::new(|| ROWS.map(statement));

/// The statement with `rows` rows of numbered parameters.
fn statement(rows: usize) -> String {
    let mut sql = String::from(
        "INSERT OR FAIL INTO events (id, execution_id, sequence, step_id, type, schema_version, \
         timestamp, payload, causation_id, correlation_id, idempotency_key, position, principal) \
         VALUES ",
    );
    for row in 0..rows {
        sql.push_str(if row == 0 { "(" } else { ", (" });
        for column in 0..COLUMNS {
            if column > 0 {
                sql.push_str(", ");
            }
            sql.push_str(&format!("?{}", row * COLUMNS + column + 1));
        }
        sql.push(')');
    }
    sql
}

/// One event's columns, borrowed from its commit and the commit's encoded text.
pub(super) struct EventRow<'a> {
    pub id: &'a str,
    pub execution_id: &'a str,
    pub sequence: i64,
    pub step_id: Option<&'a str>,
    pub type_name: &'static str,
    pub schema_version: i64,
    pub timestamp: &'a str,
    pub payload: &'a str,
    pub causation_id: &'a str,
    pub correlation_id: &'a str,
    pub idempotency_key: Option<&'a str>,
    pub position: i64,
    pub principal: Option<&'a str>,
}

impl EventRow<'_> {
    /// Binds the row's values as parameters `first`, `first + 1`, ….
    fn bind(&self, statement: &mut rusqlite::Statement<'_>, first: usize) -> rusqlite::Result<()> {
        let values: [&dyn ToSql; COLUMNS] = [
            &self.id,
            &self.execution_id,
            &self.sequence,
            &self.step_id,
            &self.type_name,
            &self.schema_version,
            &self.timestamp,
            &self.payload,
            &self.causation_id,
            &self.correlation_id,
            &self.idempotency_key,
            &self.position,
            &self.principal,
        ];
        for (offset, value) in values.into_iter().enumerate() {
            statement.raw_bind_parameter(first + offset, value)?;
        }
        Ok(())
    }
}

/// How `rows` rows are split into statements: the sizes of [`ROWS`], largest first, each as
/// often as it fits in what is left (an index into `ROWS` and how many rows it takes).
pub(super) fn chunks(rows: usize) -> impl Iterator<Item = (usize, usize)> {
    let mut left = rows;
    ROWS.iter().enumerate().flat_map(move |(index, &size)| {
        let times = left / size;
        left %= size;
        std::iter::repeat_n((index, size), times)
    })
}

/// Inserts `rows` in order.
pub(super) fn insert(
    statements: &mut Statements<'_>,
    rows: &[EventRow<'_>],
) -> Result<(), StoreError> {
    let mut rest = rows;
    for (index, size) in chunks(rows.len()) {
        let (chunk, after) = rest.split_at(size);
        rest = after;
        let statement = statements.events(index)?;
        for (row, event) in chunk.iter().enumerate() {
            event
                .bind(statement, row * COLUMNS + 1)
                .map_err(map_rusqlite_error)?;
        }
        let inserted = statement.raw_execute().map_err(map_rusqlite_error)?;
        if inserted != size {
            return Err(StoreError::Internal(format!(
                "a statement inserting {size} events inserted {inserted}"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_every_row_in_the_fewest_statements_of_the_sizes() {
        for rows in 0..200 {
            let sizes: Vec<usize> = chunks(rows).map(|(_, size)| size).collect();
            assert_eq!(sizes.iter().sum::<usize>(), rows, "{rows}: {sizes:?}");
            assert!(sizes.windows(2).all(|pair| pair[0] >= pair[1]), "{sizes:?}");
            // Below the largest size, each size is used at most once (binary digits).
            let small: Vec<&usize> = sizes.iter().filter(|&&size| size < ROWS[0]).collect();
            let mut unique = small.clone();
            unique.dedup();
            assert_eq!(small, unique, "{rows}: {sizes:?}");
        }
        let sizes: Vec<usize> = chunks(29).map(|(_, size)| size).collect();
        assert_eq!(sizes, [16, 8, 4, 1]);
        assert!(chunks(70).all(|(index, size)| ROWS[index] == size));
    }

    #[test]
    fn each_statement_has_its_rows_of_numbered_parameters() {
        for (index, rows) in ROWS.iter().enumerate() {
            let sql = sql(index).expect("a statement");
            let last = rows * COLUMNS;
            assert!(sql.ends_with(&format!("?{last})")), "{sql}");
            assert!(!sql.contains(&format!("?{}", last + 1)), "{sql}");
            assert_eq!(sql.matches("), (").count(), rows - 1, "{sql}");
        }
    }
}
