//! The SQL of SQLite writes, run on the writer thread's rusqlite connection (`writer.rs`):
//! a group of commits in one transaction, one execution's commit, and retention. Statements are
//! prepared once per connection (`prepare_cached`), taken from that cache once per transaction
//! (`statements.rs`) and bind text prepared before the commit was queued (`ready.rs`), so a row
//! costs its binds, a step and a reset, with no round trip to another thread.

use std::sync::atomic::{AtomicU64, Ordering};

use rusqlite::{Connection, ErrorCode, ToSql, TransactionBehavior, params, params_from_iter};

use keel_actors::error::StoreError;
use keel_actors::store::Commit;
use keel_actors::time;

use super::super::{sequence_conflict, sqlite_code_is_unavailable};
use super::event_rows::{self, EventRow};
use super::positions::{EventPositions, RAISE_HIGH_WATER};
use super::ready::{Encoded, ReadyCommit};
use super::statements::{Sql, Statements};
use keel_actors::ids::{ConsumerId, JobId, RunnerId, SessionId};

pub(super) const INSERT_EXECUTION: &str = "INSERT INTO executions (id, agent_id, status, labels, input, \
     output, created_at, updated_at, session_id, consumer_id, last_sequence, phase, finished_at) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13) ON CONFLICT (id) DO NOTHING";

/// agent_id, labels, input and created_at are fixed at creation and never rewritten. This one
/// writes the phase and `finished_at` (migration 0009) with the status, so it moves the row's
/// index entries; the two below leave them alone.
pub(super) const UPDATE_EXECUTION: &str = "UPDATE executions SET status = ?1, output = ?2, \
     updated_at = ?3, session_id = ?4, consumer_id = ?5, last_sequence = ?6, phase = ?9, \
     finished_at = ?10 WHERE id = ?7 AND last_sequence = ?8";

/// `UPDATE_EXECUTION` for a commit that moves the status within its phase, between `running` and
/// `blocked` (T1's job does on 10 of its 12 updates): no column an index of `executions` reads is
/// in the `SET` list, so SQLite rewrites the row alone (migration 0009). It matches only a row
/// whose phase is `?9`, so a wrong `Commit::previous_status` finds nothing and the full update
/// runs; the CHECK on `phase` refuses a status of another phase.
pub(super) const UPDATE_EXECUTION_SAME_PHASE: &str = "UPDATE executions SET status = ?1, \
     output = ?2, updated_at = ?3, session_id = ?4, consumer_id = ?5, last_sequence = ?6 \
     WHERE id = ?7 AND last_sequence = ?8 AND phase = ?9";

/// `UPDATE_EXECUTION` for a commit that leaves the status as it was: the status is not in the
/// `SET` list either. It matches only a row whose status is `?1`, so a wrong
/// `Commit::previous_status` finds nothing and the full update runs.
pub(super) const UPDATE_EXECUTION_SAME_STATUS: &str = "UPDATE executions SET output = ?2, \
     updated_at = ?3, session_id = ?4, consumer_id = ?5, last_sequence = ?6 \
     WHERE id = ?7 AND last_sequence = ?8 AND status = ?1";

pub(super) const INSERT_LABEL: &str =
    "INSERT INTO execution_labels (execution_id, key, value) VALUES (?1, ?2, ?3)";

pub(super) const UPSERT_STEP: &str = "INSERT INTO steps (id, execution_id, tool_id, status, attempt, \
     max_attempts, remote, job_id, runner_id, deadline, updated_at) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) \
     ON CONFLICT (id) DO UPDATE SET tool_id = excluded.tool_id, status = excluded.status, \
     attempt = excluded.attempt, max_attempts = excluded.max_attempts, \
     remote = excluded.remote, job_id = excluded.job_id, runner_id = excluded.runner_id, \
     deadline = excluded.deadline, updated_at = excluded.updated_at";

/// Writes one execution's checked commit with its encoded text: the projection row (which
/// checks that the events follow the stored ones), its labels on first insert and the steps.
/// Its events are given the next positions and added to `events`, for the caller to insert
/// (`event_rows::insert`) after this commit or after the whole group.
pub(super) fn write_commit<'a>(
    statements: &mut Statements<'_>,
    commit: &'a Commit,
    encoded: &'a Encoded,
    positions: &mut EventPositions,
    events: &mut Vec<EventRow<'a>>,
) -> Result<(), StoreError> {
    let execution = &commit.execution;
    let id = execution.id.as_str();
    let previous_sequence = encoded.previous_sequence;
    let output = encoded.output.as_deref();
    let updated_at = encoded.updated_at.as_str();
    let mut written = false;
    let phase = super::super::phase(execution.status);
    // `updated_at` of the commit that made the execution terminal: retention's order.
    let finished_at = execution.status.is_terminal().then_some(updated_at);
    if let Some(creation) = &encoded.creation {
        let inserted = statements
            .get(Sql::InsertExecution)?
            .execute(params![
                id,
                execution.agent_id.as_str(),
                execution.status.as_str(),
                creation.labels.as_deref(),
                creation.input.as_str(),
                output,
                creation.created_at.as_str(),
                updated_at,
                execution.session_id.as_ref().map(SessionId::as_str),
                execution.consumer_id.as_ref().map(ConsumerId::as_str),
                execution.last_sequence,
                phase,
                finished_at,
            ])
            .map_err(map_rusqlite_error)?;
        if inserted == 1 {
            written = true;
            let insert_label = statements.get(Sql::InsertLabel)?;
            for (key, value) in execution.labels.as_deref().into_iter().flatten() {
                insert_label
                    .execute(params![id, key, value])
                    .map_err(map_rusqlite_error)?;
            }
        }
    }
    if !written {
        // The parameters ?1 to ?8 of every update, then those of the update's own (?9, ?10).
        let session_id = execution.session_id.as_ref().map(SessionId::as_str);
        let consumer_id = execution.consumer_id.as_ref().map(ConsumerId::as_str);
        let shared: [&dyn ToSql; 8] = [
            &execution.status.as_str(),
            &output,
            &updated_at,
            &session_id,
            &consumer_id,
            &execution.last_sequence,
            &id,
            &previous_sequence,
        ];
        let mut update = |sql: Sql, own: &[&dyn ToSql]| {
            statements
                .get(sql)?
                .execute(params_from_iter(shared.iter().chain(own)))
                .map_err(map_rusqlite_error)
        };
        // The status (or at least the phase) as it was, when the caller says so: the narrower
        // updates, each of which matches nothing when the hint is wrong.
        let mut updated = match commit.previous_status {
            Some(previous) if previous == execution.status => {
                update(Sql::UpdateExecutionSameStatus, &[])?
            }
            Some(previous) if super::super::phase(previous) == phase => {
                update(Sql::UpdateExecutionSamePhase, &[&phase])?
            }
            _ => 0,
        };
        if updated == 0 {
            updated = update(Sql::UpdateExecution, &[&phase, &finished_at])?;
        }
        if updated == 0 {
            return Err(sequence_conflict(&execution.id, previous_sequence + 1));
        }
    }
    for (event, (timestamp, payload)) in commit.events.iter().zip(&encoded.events) {
        events.push(EventRow {
            id: &event.id,
            execution_id: id,
            sequence: event.sequence,
            step_id: event.step_id.as_ref().map(|step| step.as_str()),
            type_name: event.body.type_name(),
            schema_version: event.schema_version,
            timestamp,
            payload,
            causation_id: &event.causation_id,
            correlation_id: &event.correlation_id,
            idempotency_key: event.idempotency_key.as_deref(),
            position: positions.next(),
            principal: event.principal.as_deref(),
        });
    }
    if !commit.steps.is_empty() {
        let upsert_step = statements.get(Sql::UpsertStep)?;
        for (step, (deadline, step_updated_at)) in commit.steps.iter().zip(&encoded.steps) {
            upsert_step
                .execute(params![
                    step.id.as_str(),
                    step.execution_id.as_str(),
                    step.tool_id.as_str(),
                    step.status.as_str(),
                    step.attempt,
                    step.max_attempts,
                    step.remote,
                    step.job_id.as_ref().map(JobId::as_str),
                    step.runner_id.as_ref().map(RunnerId::as_str),
                    deadline,
                    step_updated_at,
                ])
                .map_err(map_rusqlite_error)?;
        }
    }
    Ok(())
}

/// Deletes up to `limit` terminal executions last updated before `before` (RFC 3339), oldest
/// first, with all their rows, inside the caller's transaction; returns how many.
pub(super) fn delete_terminal_before(
    connection: &Connection,
    before: &str,
    limit: i64,
) -> Result<u64, StoreError> {
    // Without statistics the planner may prefer another index and sort every terminal row; the
    // partial index yields the oldest finished ones directly (migration 0009).
    let select = "SELECT id FROM executions INDEXED BY executions_finished \
         WHERE finished_at IS NOT NULL AND finished_at < ?1 \
         ORDER BY finished_at, id LIMIT ?2";
    let ids = connection
        .prepare_cached(select)
        .and_then(|mut statement| {
            statement
                .query_map(params![before, limit.max(0)], |row| row.get::<_, String>(0))?
                .collect::<Result<Vec<String>, _>>()
        })
        .map_err(map_rusqlite_error)?;
    if ids.is_empty() {
        return Ok(0);
    }
    // The newest events may be among those deleted; their positions stay handed out.
    connection
        .prepare_cached(RAISE_HIGH_WATER)
        .and_then(|mut statement| statement.execute([]))
        .map_err(map_rusqlite_error)?;
    // Children first: the foreign keys point at `executions`.
    let deletes = [
        "DELETE FROM events WHERE execution_id = ?1",
        "DELETE FROM execution_labels WHERE execution_id = ?1",
        "DELETE FROM steps WHERE execution_id = ?1",
        "DELETE FROM executions WHERE id = ?1",
    ];
    for delete in deletes {
        let mut statement = connection
            .prepare_cached(delete)
            .map_err(map_rusqlite_error)?;
        for id in &ids {
            statement.execute([id]).map_err(map_rusqlite_error)?;
        }
    }
    Ok(ids.len() as u64)
}

/// Maps a rusqlite error to the port's error classes, as `map_sqlx_error` does for sqlx:
/// uniqueness is a conflict, busy/locked/read-only/i-o/full/cannot-open is an outage.
pub(crate) fn map_rusqlite_error(error: rusqlite::Error) -> StoreError {
    const CONSTRAINT_PRIMARYKEY: i32 = 1555;
    const CONSTRAINT_UNIQUE: i32 = 2067;
    match error {
        rusqlite::Error::SqliteFailure(failure, message) => {
            let message = message.unwrap_or_else(|| failure.to_string());
            let extended = failure.extended_code;
            if failure.code == ErrorCode::ConstraintViolation
                && matches!(extended, CONSTRAINT_PRIMARYKEY | CONSTRAINT_UNIQUE)
            {
                StoreError::Conflict(message)
            } else if sqlite_code_is_unavailable(&extended.to_string()) {
                StoreError::Unavailable(message)
            } else {
                StoreError::Internal(message)
            }
        }
        other => StoreError::Internal(other.to_string()),
    }
}

/// Upserts one webhook subscription's acknowledged position.
pub(super) fn set_webhook_position(
    connection: &Connection,
    id: &str,
    position: i64,
) -> Result<(), StoreError> {
    let sql = super::super::feed::UPSERT_WEBHOOK_POSITION
        .replace("{id}", "?1")
        .replace("{position}", "?2")
        .replace("{now}", "?3");
    connection
        .prepare_cached(&sql)
        .and_then(|mut statement| {
            statement.execute(params![id, position, time::format(&time::now())])
        })
        .map_err(map_rusqlite_error)?;
    Ok(())
}

/// Commits a group: checks every commit, then writes the ones that pass in one transaction.
/// The events of the whole group are first inserted together at the end (`event_rows.rs`); if
/// that fails, the transaction is rolled back and the group written again with each commit's
/// events inserted right after its other rows. When a commit fails while being written so, the transaction is rolled back and, unless the
/// group is all or nothing, that commit fails alone and the others are written again in a new
/// transaction (as if it had been submitted alone, after the ones before it). `Unavailable`
/// fails every commit that is not already failed.
pub(super) fn commit_group(
    connection: &mut Connection,
    group: &[ReadyCommit],
    all_or_nothing: bool,
    transactions: &AtomicU64,
    positions: &mut EventPositions,
) -> Vec<Result<(), StoreError>> {
    let mut results: Vec<Result<(), StoreError>> = Vec::with_capacity(group.len());
    let mut pending: Vec<(&Commit, &Encoded, usize)> = Vec::with_capacity(group.len());
    for (index, ready) in group.iter().enumerate() {
        match &ready.encoded {
            Ok(encoded) => {
                pending.push((&ready.commit, encoded, index));
                results.push(Ok(()));
            }
            Err(error) if all_or_nothing => return vec![Err(error.clone()); group.len()],
            Err(error) => results.push(Err(error.clone())),
        }
    }
    // The group's events inserted together until that fails; then each commit's after it,
    // which tells which commit failed (`event_rows.rs`).
    let mut events_together = true;
    while !pending.is_empty() {
        let mut failed_at = None;
        let mut events_failed = false;
        let outcome = in_transaction(connection, transactions, |connection| {
            let mut statements = Statements::new(connection);
            let mut events = Vec::new();
            for (position, &(commit, encoded, _)) in pending.iter().enumerate() {
                let written =
                    write_commit(&mut statements, commit, encoded, positions, &mut events)
                        .and_then(|()| {
                            if events_together {
                                return Ok(());
                            }
                            event_rows::insert(&mut statements, &events)?;
                            events.clear();
                            Ok(())
                        });
                if let Err(error) = written {
                    failed_at = Some(position);
                    return Err(error);
                }
            }
            event_rows::insert(&mut statements, &events).inspect_err(|_| events_failed = true)
        });
        if outcome.is_err()
            && let Err(error) = positions.reload(connection)
        {
            // Without a trusted counter nothing more is written in this group.
            for (_, _, index) in pending {
                results[index] = Err(error.clone());
            }
            return results;
        }
        match (outcome, failed_at) {
            (Ok(()), _) => break,
            (Err(error), _) if events_failed && !matches!(error, StoreError::Unavailable(_)) => {
                events_together = false;
            }
            (Err(error), Some(position))
                if !all_or_nothing && !matches!(error, StoreError::Unavailable(_)) =>
            {
                let (_, _, index) = pending.remove(position);
                results[index] = Err(error);
            }
            (Err(error), _) => {
                for (_, _, index) in pending {
                    results[index] = Err(error.clone());
                }
                if all_or_nothing {
                    return vec![Err(error); group.len()];
                }
                break;
            }
        }
    }
    results
}

/// Runs `work` in a `BEGIN IMMEDIATE` transaction and commits it; rolls back on failure.
pub(super) fn in_transaction<T>(
    connection: &mut Connection,
    transactions: &AtomicU64,
    work: impl FnOnce(&Connection) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    let transaction = connection
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(map_rusqlite_error)?;
    // Dropping the transaction on failure rolls it back.
    let value = work(&transaction)?;
    transaction.commit().map_err(map_rusqlite_error)?;
    transactions.fetch_add(1, Ordering::Relaxed);
    Ok(value)
}
