//! Event positions on SQLite: the writer thread hands them out itself (migration 0008).
//!
//! A position is kernel-wide, increases with every event written and is never reused, even
//! after retention deletes the newest events: feed consumers and webhook subscriptions keep
//! one as their cursor. `AUTOINCREMENT` guaranteed that by rewriting `sqlite_sequence` on
//! every insert statement; here the writer, the only connection that writes, keeps the last
//! position in memory and binds each event's explicitly. What survives a restart is the
//! larger of the highest stored position and `event_positions.high_water`, which retention
//! raises to the highest stored position before it deletes anything.

use rusqlite::Connection;

use keel_actors::error::StoreError;

use super::write::map_rusqlite_error;

/// The highest position ever handed out, as the database says after a restart or a rollback.
const LAST: &str = "SELECT MAX(COALESCE((SELECT MAX(position) FROM events), 0), \
     COALESCE((SELECT high_water FROM event_positions WHERE id = 1), 0))";

/// Keeps the highest stored position as the high water; run before retention deletes.
pub(super) const RAISE_HIGH_WATER: &str = "UPDATE event_positions SET high_water = \
     MAX(high_water, COALESCE((SELECT MAX(position) FROM events), 0)) WHERE id = 1";

/// The writer thread's counter of event positions.
#[derive(Debug)]
pub(super) struct EventPositions {
    last: i64,
}

impl EventPositions {
    /// Reads the highest position handed out so far.
    pub fn load(connection: &Connection) -> Result<Self, StoreError> {
        let last = connection
            .query_row(LAST, [], |row| row.get(0))
            .map_err(map_rusqlite_error)?;
        Ok(Self { last })
    }

    /// Returns the position of the next event.
    pub fn next(&mut self) -> i64 {
        self.last += 1;
        self.last
    }

    /// Re-reads the counter after a transaction was rolled back: the positions it used were
    /// never committed, and the database is the authority on what was.
    pub fn reload(&mut self, connection: &Connection) -> Result<(), StoreError> {
        *self = Self::load(connection)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Connection {
        let connection = Connection::open_in_memory().expect("in-memory database");
        connection
            .execute_batch(
                "CREATE TABLE events (position INTEGER PRIMARY KEY, id TEXT NOT NULL); \
                 CREATE TABLE event_positions (id INTEGER PRIMARY KEY, high_water INTEGER); \
                 INSERT INTO event_positions VALUES (1, 0);",
            )
            .expect("schema");
        connection
    }

    #[test]
    fn positions_continue_above_both_the_stored_rows_and_the_high_water() {
        let connection = schema();
        let mut positions = EventPositions::load(&connection).expect("load");
        assert_eq!(positions.next(), 1, "an empty log starts at 1");
        connection
            .execute_batch("INSERT INTO events VALUES (7, 'a'), (9, 'b')")
            .expect("rows");
        positions.reload(&connection).expect("reload");
        assert_eq!(positions.next(), 10, "above the highest stored");
        connection
            .execute_batch(&format!("{RAISE_HIGH_WATER}; DELETE FROM events"))
            .expect("retention");
        positions.reload(&connection).expect("reload");
        assert_eq!(positions.next(), 10, "9 was handed out before the delete");
        connection
            .execute_batch("UPDATE event_positions SET high_water = 20")
            .expect("high water");
        let mut restarted = EventPositions::load(&connection).expect("load");
        assert_eq!(restarted.next(), 21);
    }
}
