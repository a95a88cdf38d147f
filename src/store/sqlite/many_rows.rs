//! The events and step rows of a whole write transaction, written with multi-row statements.
//!
//! Under load one transaction carries the commits of many executions, about two events and one
//! step row per commit. Written one statement per row, each row paid for a statement's fixed
//! work as well as its own: the program's start, a cursor on the table and each index opened
//! and closed, the statement's halt and reset. Here the writer writes each commit's execution
//! row (and a new one's labels) as it goes through the commits, collects the events and steps
//! of those that pass, and then writes them in as few statements per table as the sizes in
//! [`ROWS`] add up to (29 rows: 16 + 8 + 4 + 1).
//!
//! The execution rows stay one statement each: an `UPDATE … FROM (VALUES …)` of many rows cost
//! the writer more than the single-row updates it replaced (SQLite first collects the joined
//! rows in a temporary table; docs/benchmarks.md).
//!
//! Positions are handed out as the events are collected, in the group's order, and rows are
//! written in that order, as the one-by-one path does (a step written twice in one transaction
//! ends as its later row says). A multi-row statement cannot say which commit's row broke a
//! constraint (a reused creation idempotency key), so when one fails `write::commit_group`
//! rolls the transaction back and writes the group again one row per statement, which decides
//! each commit exactly as before.

use std::sync::LazyLock;

use rusqlite::ToSql;

use keel_actors::error::StoreError;

use super::statements::Statements;
use super::write::map_rusqlite_error;

/// Row counts of the multi-row statements, largest first.
pub(super) const ROWS: [usize; 6] = [32, 16, 8, 4, 2, 1];

/// What a multi-row statement writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Table {
    Events,
    Steps,
}

impl Table {
    pub const ALL: [Table; 2] = [Table::Events, Table::Steps];

    /// Columns per row.
    const fn columns(self) -> usize {
        match self {
            Table::Events => 12,
            Table::Steps => 11,
        }
    }

    /// The statement up to `VALUES`, and what follows the rows.
    fn text(self) -> (&'static str, &'static str) {
        match self {
            Table::Events => (
                "INSERT INTO events (id, execution_id, sequence, step_id, type, \
                 schema_version, timestamp, payload, causation_id, correlation_id, \
                 idempotency_key, position) VALUES ",
                "",
            ),
            // As `write::UPSERT_STEP`.
            Table::Steps => (
                "INSERT INTO steps (id, execution_id, tool_id, status, attempt, max_attempts, \
                 remote, job_id, runner_id, deadline, updated_at) VALUES ",
                " ON CONFLICT (id) DO UPDATE SET tool_id = excluded.tool_id, \
                 status = excluded.status, attempt = excluded.attempt, \
                 max_attempts = excluded.max_attempts, remote = excluded.remote, \
                 job_id = excluded.job_id, runner_id = excluded.runner_id, \
                 deadline = excluded.deadline, updated_at = excluded.updated_at",
            ),
        }
    }

    /// The statement writing `ROWS[index]` rows.
    pub fn sql(self, index: usize) -> Option<&'static str> {
        STATEMENTS
            .get(self as usize)
            .and_then(|texts| texts.get(index))
            .map(String::as_str)
    }
}

/// Every table's statements, by table and index into `ROWS`.
static STATEMENTS: LazyLock<[[String; ROWS.len()]; Table::ALL.len()]> =
    LazyLock::new(|| Table::ALL.map(|table| ROWS.map(|rows| statement(table, rows))));

/// `table`'s statement with `rows` rows of numbered parameters.
fn statement(table: Table, rows: usize) -> String {
    let (head, tail) = table.text();
    let columns = table.columns();
    let mut sql = String::from(head);
    for row in 0..rows {
        sql.push_str(if row == 0 { "(" } else { ", (" });
        for column in 0..columns {
            if column > 0 {
                sql.push_str(", ");
            }
            sql.push_str(&format!("?{}", row * columns + column + 1));
        }
        sql.push(')');
    }
    sql.push_str(tail);
    sql
}

/// A row of one of the tables, borrowed from its commit and the commit's encoded text.
pub(super) trait Row {
    const TABLE: Table;
    /// Binds the row's values as parameters `first`, `first + 1`, ….
    fn bind(&self, statement: &mut rusqlite::Statement<'_>, first: usize) -> rusqlite::Result<()>;
}

/// Binds `values` from parameter `first` on.
fn bind_all(
    statement: &mut rusqlite::Statement<'_>,
    first: usize,
    values: &[&dyn ToSql],
) -> rusqlite::Result<()> {
    for (offset, value) in values.iter().enumerate() {
        statement.raw_bind_parameter(first + offset, value)?;
    }
    Ok(())
}

/// One event's columns.
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
}

impl Row for EventRow<'_> {
    const TABLE: Table = Table::Events;

    fn bind(&self, statement: &mut rusqlite::Statement<'_>, first: usize) -> rusqlite::Result<()> {
        bind_all(
            statement,
            first,
            &[
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
            ],
        )
    }
}

/// One step's columns.
pub(super) struct StepRow<'a> {
    pub id: &'a str,
    pub execution_id: &'a str,
    pub tool_id: &'a str,
    pub status: &'static str,
    pub attempt: i64,
    pub max_attempts: i64,
    pub remote: bool,
    pub job_id: Option<&'a str>,
    pub runner_id: Option<&'a str>,
    pub deadline: Option<&'a str>,
    pub updated_at: &'a str,
}

impl Row for StepRow<'_> {
    const TABLE: Table = Table::Steps;

    fn bind(&self, statement: &mut rusqlite::Statement<'_>, first: usize) -> rusqlite::Result<()> {
        bind_all(
            statement,
            first,
            &[
                &self.id,
                &self.execution_id,
                &self.tool_id,
                &self.status,
                &self.attempt,
                &self.max_attempts,
                &self.remote,
                &self.job_id,
                &self.runner_id,
                &self.deadline,
                &self.updated_at,
            ],
        )
    }
}

/// The rows a transaction writes after the rest of its commits' rows.
#[derive(Default)]
pub(super) struct Later<'a> {
    pub events: Vec<EventRow<'a>>,
    pub steps: Vec<StepRow<'a>>,
}

impl Later<'_> {
    /// Writes the events, then the steps, each in order.
    pub fn write(&self, statements: &mut Statements<'_>) -> Result<(), StoreError> {
        write_rows(statements, &self.events)?;
        write_rows(statements, &self.steps)
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

/// Writes `rows` in order with `R::TABLE`'s multi-row statements.
fn write_rows<R: Row>(statements: &mut Statements<'_>, rows: &[R]) -> Result<(), StoreError> {
    let columns = R::TABLE.columns();
    let mut rest = rows;
    for (index, size) in chunks(rows.len()) {
        let (chunk, after) = rest.split_at(size);
        rest = after;
        let statement = statements.many(R::TABLE, index)?;
        for (row, values) in chunk.iter().enumerate() {
            values
                .bind(statement, row * columns + 1)
                .map_err(map_rusqlite_error)?;
        }
        let written = statement.raw_execute().map_err(map_rusqlite_error)?;
        if written != size {
            return Err(StoreError::Internal(format!(
                "a statement writing {size} rows of {:?} wrote {written}",
                R::TABLE
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

    /// The one-row statements are the commit path's own, so the two paths write alike.
    #[test]
    fn one_row_statements_are_the_single_row_ones() {
        let words = |sql: &str| sql.split_whitespace().collect::<Vec<_>>().join(" ");
        let one = ROWS.len() - 1;
        assert_eq!(ROWS[one], 1);
        let pairs = [
            (Table::Events, super::super::write::INSERT_EVENT),
            (Table::Steps, super::super::write::UPSERT_STEP),
        ];
        for (table, single) in pairs {
            assert_eq!(words(table.sql(one).expect("a statement")), words(single));
        }
    }

    #[test]
    fn each_statement_has_its_rows_of_numbered_parameters() {
        for table in Table::ALL {
            let columns = table.columns();
            for (index, rows) in ROWS.iter().enumerate() {
                let sql = table.sql(index).expect("a statement");
                let last = rows * columns;
                assert!(sql.contains(&format!("?{last})")), "{sql}");
                assert!(!sql.contains(&format!("?{}", last + 1)), "{sql}");
                assert_eq!(sql.matches("), (").count(), rows - 1, "{sql}");
            }
        }
    }
}
