//! The commit statements of one write transaction, each taken from the connection's statement
//! cache once and run for every commit of the group. Taking a statement from rusqlite's cache
//! costs a lookup and a key allocation, and giving it back `sqlite3_clear_bindings`; done for
//! every row, that was about 4 % of the writer thread's instructions (docs/benchmarks.md).
//! Every run binds all of a statement's parameters and resets it afterwards, so nothing of one
//! commit is left for the next.

use rusqlite::{CachedStatement, Connection};

use keel_actors::error::StoreError;

use super::event_rows::{self, ROWS};
use super::write::{
    INSERT_EXECUTION, INSERT_LABEL, UPDATE_EXECUTION, UPDATE_EXECUTION_SAME_PHASE,
    UPDATE_EXECUTION_SAME_STATUS, UPSERT_STEP, map_rusqlite_error,
};

/// A commit statement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Sql {
    InsertExecution,
    UpdateExecution,
    UpdateExecutionSamePhase,
    UpdateExecutionSameStatus,
    InsertLabel,
    UpsertStep,
}

impl Sql {
    const ALL: [Sql; 6] = [
        Sql::InsertExecution,
        Sql::UpdateExecution,
        Sql::UpdateExecutionSamePhase,
        Sql::UpdateExecutionSameStatus,
        Sql::InsertLabel,
        Sql::UpsertStep,
    ];

    fn text(self) -> &'static str {
        match self {
            Sql::InsertExecution => INSERT_EXECUTION,
            Sql::UpdateExecution => UPDATE_EXECUTION,
            Sql::UpdateExecutionSamePhase => UPDATE_EXECUTION_SAME_PHASE,
            Sql::UpdateExecutionSameStatus => UPDATE_EXECUTION_SAME_STATUS,
            Sql::InsertLabel => INSERT_LABEL,
            Sql::UpsertStep => UPSERT_STEP,
        }
    }
}

/// The statements a transaction has taken so far; they go back to the cache when this is
/// dropped, before the transaction commits or rolls back.
pub(super) struct Statements<'c> {
    connection: &'c Connection,
    taken: [Option<CachedStatement<'c>>; Sql::ALL.len()],
    /// The multi-row event inserts (`event_rows.rs`), by index into its `ROWS`.
    events: [Option<CachedStatement<'c>>; ROWS.len()],
}

impl<'c> Statements<'c> {
    /// Takes nothing yet: each statement is taken on its first use.
    pub fn new(connection: &'c Connection) -> Self {
        Self {
            connection,
            taken: Default::default(),
            events: Default::default(),
        }
    }

    /// Returns `sql`'s statement, taking it from the cache (or preparing it) on first use.
    pub fn get(&mut self, sql: Sql) -> Result<&mut CachedStatement<'c>, StoreError> {
        take(self.connection, &mut self.taken[sql as usize], sql.text())
    }

    /// Returns the statement inserting `ROWS[index]` events, taking it on first use.
    pub fn events(&mut self, index: usize) -> Result<&mut CachedStatement<'c>, StoreError> {
        let missing = || StoreError::Internal(format!("no event insert of index {index}"));
        let sql = event_rows::sql(index).ok_or_else(missing)?;
        let slot = self.events.get_mut(index).ok_or_else(missing)?;
        take(self.connection, slot, sql)
    }

    /// How many different statements have been taken (tests).
    #[cfg(test)]
    pub fn taken(&self) -> usize {
        self.taken.iter().chain(&self.events).flatten().count()
    }
}

/// Fills `slot` with `sql`'s statement from `connection`'s cache unless it holds it already.
fn take<'s, 'c>(
    connection: &'c Connection,
    slot: &'s mut Option<CachedStatement<'c>>,
    sql: &str,
) -> Result<&'s mut CachedStatement<'c>, StoreError> {
    if slot.is_none() {
        *slot = Some(connection.prepare_cached(sql).map_err(map_rusqlite_error)?);
    }
    slot.as_mut()
        .ok_or_else(|| StoreError::Internal(format!("{sql} was not prepared")))
}

#[cfg(test)]
mod tests {
    use super::super::super::StoreOptions;
    use super::super::SqliteStore;
    use super::*;

    #[tokio::test]
    async fn each_slot_holds_its_own_statement_and_is_taken_once() {
        for (index, sql) in Sql::ALL.iter().enumerate() {
            assert_eq!(*sql as usize, index, "{sql:?} indexes its own slot");
        }
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("keel.db");
        let store = SqliteStore::open(&path, &StoreOptions::default())
            .await
            .expect("migrated store");
        let connection = Connection::open(&path).expect("second connection");
        let mut statements = Statements::new(&connection);
        for sql in Sql::ALL {
            let first = statements
                .get(sql)
                .map(|statement| statement.parameter_count());
            let again = statements
                .get(sql)
                .map(|statement| statement.parameter_count());
            assert!(
                matches!(first, Ok(count) if count > 0),
                "{sql:?}: {first:?}"
            );
            assert_eq!(first.ok(), again.ok());
        }
        assert_eq!(statements.taken(), Sql::ALL.len());
        drop(statements);
        drop(connection);
        store.close().await;
    }
}
