//! The SQL of PostgreSQL writes, on the writer connection: commit groups and retention. Called
//! by `PostgresStore`.
//!
//! A group is written by one statement, so it costs one round trip: a `WITH` query whose first
//! parts insert or update the projection rows of all its executions (`UNNEST` of column
//! arrays; an update only where the stored last sequence is the one the commit follows) and
//! whose later parts insert the labels, events and steps of exactly the executions whose row
//! was written (they read the ids the first parts return). The executions not written are the
//! conflicts. A commit that follows another commit of the same execution in the group is merged
//! with it (written together or not at all); one that does not follow it waits for a second
//! statement. Events are inserted in group order, so their positions follow it.
//!
//! The store writer's group commit runs that statement alone (an implicit transaction: the
//! conflicts fail alone, everything else commits at once); `Store::commit` runs it inside
//! `BEGIN … COMMIT` and rolls back on the first conflict (all or nothing).

use std::collections::{HashMap, HashSet};

use sqlx::Connection;
use sqlx::postgres::PgConnection;

use keel_actors::error::StoreError;
use keel_actors::store::Commit;

use super::super::{
    PartitionFence, expected_previous_sequence, map_sqlx_error, partition_of, sequence_conflict,
};
use super::columns::{EventColumns, ExecutionColumns, LabelColumns, StepColumns};

/// The statement that writes one round; its 38 parameters are bound by [`write_round`].
pub(super) const WRITE_ROUND: &str = "WITH b AS (SELECT * FROM UNNEST($1::text[], $2::text[], \
     $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], \
     $10::text[], $11::int8[], $12::int8[]) AS b (id, agent_id, status, labels, input, output, \
     created_at, updated_at, session_id, consumer_id, last_sequence, previous)), \
     inserted AS (INSERT INTO executions (id, agent_id, status, labels, input, output, \
     created_at, updated_at, session_id, consumer_id, last_sequence) \
     SELECT id, agent_id, status, labels::json, input::json, output::json, \
     created_at::timestamptz, updated_at::timestamptz, session_id, consumer_id, last_sequence \
     FROM b WHERE previous = 0 ON CONFLICT (id) DO NOTHING RETURNING id), \
     updated AS (UPDATE executions AS e SET status = b.status, output = b.output::json, \
     updated_at = b.updated_at::timestamptz, session_id = b.session_id, \
     consumer_id = b.consumer_id, last_sequence = b.last_sequence FROM b \
     WHERE b.previous <> 0 AND e.id = b.id AND e.last_sequence = b.previous RETURNING e.id), \
     written AS (SELECT id FROM inserted UNION ALL SELECT id FROM updated), \
     new_labels AS (INSERT INTO execution_labels (execution_id, key, value) \
     SELECT l.execution_id, l.key, l.value \
     FROM UNNEST($13::text[], $14::text[], $15::text[]) AS l (execution_id, key, value) \
     WHERE l.execution_id IN (SELECT id FROM inserted)), \
     new_events AS (INSERT INTO events (id, execution_id, sequence, step_id, type, \
     schema_version, timestamp, payload, causation_id, correlation_id, idempotency_key, \
     principal) \
     SELECT v.id, v.execution_id, v.sequence, v.step_id, v.type, v.schema_version, \
     v.ts::timestamptz, v.payload::json, v.causation_id, v.correlation_id, v.key, v.principal \
     FROM UNNEST($16::text[], $17::text[], $18::int8[], $19::text[], $20::text[], \
     $21::int8[], $22::text[], $23::text[], $24::text[], $25::text[], $26::text[], \
     $27::text[]) \
     WITH ORDINALITY AS v (id, execution_id, sequence, step_id, type, schema_version, ts, \
     payload, causation_id, correlation_id, key, principal, ordinal) \
     WHERE v.execution_id IN (SELECT id FROM written) ORDER BY v.ordinal), \
     new_steps AS (INSERT INTO steps (id, execution_id, tool_id, status, attempt, \
     max_attempts, remote, job_id, runner_id, deadline, updated_at) \
     SELECT s.id, s.execution_id, s.tool_id, s.status, s.attempt, s.max_attempts, s.remote, \
     s.job_id, s.runner_id, s.deadline::timestamptz, s.updated_at::timestamptz \
     FROM UNNEST($28::text[], $29::text[], $30::text[], $31::text[], $32::int8[], \
     $33::int8[], $34::bool[], $35::text[], $36::text[], $37::text[], $38::text[]) \
     AS s (id, execution_id, tool_id, status, attempt, max_attempts, remote, job_id, \
     runner_id, deadline, updated_at) \
     WHERE s.execution_id IN (SELECT id FROM written) \
     ON CONFLICT (id) DO UPDATE SET tool_id = excluded.tool_id, status = excluded.status, \
     attempt = excluded.attempt, max_attempts = excluded.max_attempts, \
     remote = excluded.remote, job_id = excluded.job_id, runner_id = excluded.runner_id, \
     deadline = excluded.deadline, updated_at = excluded.updated_at) \
     SELECT id FROM written";

/// [`WRITE_ROUND`] in cluster mode: the same statement, fenced. Two more parameters give each
/// execution's partition (`$39`) and the epoch this kernel holds it at (`$40`); the `fence`
/// part reads those partitions `FOR SHARE` and only the executions whose partition is still at
/// that epoch are written (`bf`), so once another kernel's acquisition (which updates the row,
/// and so waits for this statement or makes it wait) has committed, nothing of this kernel's
/// commits to that partition. New executions get their partition, events their epoch and a
/// commit-ordered position: the transaction's id shifted left by 20 bits plus `$41` (the
/// events the transaction wrote before this statement) plus the event's ordinal, so the feed
/// can read below the oldest transaction still running (`super::super::feed`). It returns
/// `(id, true)` per execution written and `(id, false)` per execution fenced out.
pub(super) static WRITE_ROUND_FENCED: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| fenced(WRITE_ROUND));

/// Rewrites [`WRITE_ROUND`] into [`WRITE_ROUND_FENCED`]; a unit test checks every rewrite
/// applied.
fn fenced(statement: &str) -> String {
    const REWRITES: [(&str, &str); 7] = [
        (
            "$12::int8[]) AS b (id, agent_id, status, labels, input, output, \
             created_at, updated_at, session_id, consumer_id, last_sequence, previous)), ",
            "$12::int8[], $39::int4[], $40::int8[]) AS b (id, agent_id, status, labels, input, \
             output, created_at, updated_at, session_id, consumer_id, last_sequence, previous, \
             partition, epoch)), \
             fence AS (SELECT p.id, p.epoch FROM partitions AS p \
             WHERE p.id = ANY($39::int4[]) FOR SHARE), \
             bf AS (SELECT b.* FROM b JOIN fence AS f ON f.id = b.partition AND f.epoch = b.epoch), ",
        ),
        (
            "consumer_id, last_sequence) \
             SELECT id,",
            "consumer_id, last_sequence, partition) \
             SELECT id,",
        ),
        (
            "consumer_id, last_sequence \
             FROM b WHERE previous = 0",
            "consumer_id, last_sequence, partition \
             FROM bf AS b WHERE previous = 0",
        ),
        (
            "last_sequence = b.last_sequence FROM b \
             WHERE b.previous <> 0",
            "last_sequence = b.last_sequence FROM bf AS b \
             WHERE b.previous <> 0",
        ),
        (
            "idempotency_key, \
             principal) \
             SELECT v.id,",
            "idempotency_key, \
             principal, epoch, position) \
             SELECT v.id,",
        ),
        (
            "v.correlation_id, v.key, v.principal \
             FROM UNNEST(",
            "v.correlation_id, v.key, v.principal, \
             (SELECT bf.epoch FROM bf WHERE bf.id = v.execution_id), \
             (pg_current_xact_id()::text::int8 << 20) + $41::int8 + v.ordinal \
             FROM UNNEST(",
        ),
        (
            "deadline = excluded.deadline, updated_at = excluded.updated_at) \
             SELECT id FROM written",
            "deadline = excluded.deadline, updated_at = excluded.updated_at) \
             SELECT id, true FROM written \
             UNION ALL SELECT id, false FROM b WHERE id NOT IN (SELECT id FROM bf)",
        ),
    ];
    let mut fenced = statement.to_owned();
    for (from, to) in REWRITES {
        fenced = fenced.replacen(from, to, 1);
    }
    fenced
}

/// One execution's commits within a round, written together or not at all.
#[derive(Clone)]
pub(super) struct Unit {
    /// Indexes of the commits in the group, in order; each follows the one before.
    pub commits: Vec<usize>,
    /// Stored last sequence the first commit follows.
    pub previous: i64,
    /// Last sequence after the last commit.
    last: i64,
}

/// Checks every commit of a group: the stored last sequence each follows, or why it is
/// refused (a caller bug, `Internal`).
pub(super) fn check(group: &[Commit]) -> Vec<Result<i64, StoreError>> {
    group.iter().map(expected_previous_sequence).collect()
}

/// Writes a group as the store writer's group commit: one statement (one implicit
/// transaction) per round, one round unless a commit of an execution does not follow that
/// execution's previous commit in the group. `pending` holds the checked commits (index,
/// previous sequence) and `results` gets the conflicts. When a statement fails, returns its
/// error with `pending` holding the commits not written (the rounds before are committed).
pub(super) async fn commit_group(
    connection: &mut PgConnection,
    group: &[Commit],
    results: &mut [Result<(), StoreError>],
    pending: &mut Vec<(usize, i64)>,
    fence: Option<&dyn PartitionFence>,
) -> Result<(), StoreError> {
    while !pending.is_empty() {
        let (units, rest) = plan_round(group, pending);
        // Each round is its own (implicit) transaction: its positions start at its id.
        let outcomes = write_round(connection, group, &units, fence, 0).await?;
        for (unit, outcome) in units.iter().zip(outcomes) {
            for &index in &unit.commits {
                match outcome {
                    Outcome::Written => {}
                    Outcome::Conflict => results[index] = Err(conflict(group, index, unit)),
                    Outcome::Fenced(partition) => {
                        results[index] = Err(fenced_out(group, index, partition));
                    }
                }
            }
        }
        *pending = rest;
    }
    Ok(())
}

/// Writes a checked batch in one transaction, all or nothing: the first conflict rolls it back.
pub(super) async fn commit_all(
    connection: &mut PgConnection,
    group: &[Commit],
    mut pending: Vec<(usize, i64)>,
    fence: Option<&dyn PartitionFence>,
) -> Result<(), StoreError> {
    let mut transaction = connection.begin().await.map_err(map_sqlx_error)?;
    let mut failure = None;
    // Events written by the rounds before, in this one transaction (their positions share its
    // id; cluster mode only).
    let mut written_before = 0_i64;
    while !pending.is_empty() && failure.is_none() {
        let (units, rest) = plan_round(group, &pending);
        let offset = written_before;
        written_before += events_in(group, &units);
        match write_round(&mut transaction, group, &units, fence, offset).await {
            Ok(outcomes) => {
                failure = units
                    .iter()
                    .zip(outcomes)
                    .find_map(|(unit, outcome)| match outcome {
                        Outcome::Written => None,
                        Outcome::Conflict => Some(conflict(group, unit.commits[0], unit)),
                        Outcome::Fenced(partition) => {
                            Some(fenced_out(group, unit.commits[0], partition))
                        }
                    });
            }
            // A broken connection is dropped by the caller, which ends the transaction.
            Err(error @ StoreError::Unavailable(_)) => return Err(error),
            Err(error) => failure = Some(error),
        }
        pending = rest;
    }
    match failure {
        None => transaction.commit().await.map_err(map_sqlx_error),
        Some(error) => {
            // A failed rollback means the connection is in doubt: report that instead.
            transaction.rollback().await.map_err(map_sqlx_error)?;
            Err(error)
        }
    }
}

/// The events of `units` (an upper bound of what a round writes).
fn events_in(group: &[Commit], units: &[Unit]) -> i64 {
    let count: usize = units
        .iter()
        .flat_map(|unit| &unit.commits)
        .map(|&index| group[index].events.len())
        .sum();
    i64::try_from(count).unwrap_or(i64::MAX)
}

/// Events one transaction may write in cluster mode: its positions are its id shifted left by
/// 20 bits plus 1 … 2^20 - 1.
const EVENTS_PER_TRANSACTION: i64 = (1 << super::super::feed::TRANSACTION_BITS) - 1;

/// How one unit's write ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Written,
    /// Its first commit does not follow the stored last sequence.
    Conflict,
    /// Cluster mode: this kernel does not hold the execution's partition (any more).
    Fenced(u32),
}

/// The error of commit `index`, refused because this kernel does not hold `partition`.
fn fenced_out(group: &[Commit], index: usize, partition: u32) -> StoreError {
    StoreError::Unavailable(format!(
        "execution {} is in partition {partition}, which this kernel does not hold (another \
         kernel owns it now, or its lease could not be renewed); nothing was written",
        group[index].execution.id
    ))
}

/// The conflict of commit `index`, which was not written with its unit.
fn conflict(group: &[Commit], index: usize, unit: &Unit) -> StoreError {
    let commit = &group[index];
    let previous = if index == unit.commits[0] {
        unit.previous
    } else {
        commit.execution.last_sequence - commit.events.len() as i64
    };
    sequence_conflict(&commit.execution.id, previous + 1)
}

/// Takes the next round from `pending` (commit index, previous sequence; in group order): a
/// unit per execution, merging each commit that follows its execution's unit. Returns the
/// units and the commits left for a later round (with every later commit of their execution).
fn plan_round(group: &[Commit], pending: &[(usize, i64)]) -> (Vec<Unit>, Vec<(usize, i64)>) {
    let mut units: Vec<Unit> = Vec::with_capacity(pending.len());
    let mut by_id: HashMap<&str, usize> = HashMap::with_capacity(pending.len());
    let mut waiting: HashSet<&str> = HashSet::new();
    let mut rest = Vec::new();
    for &(index, previous) in pending {
        let execution = &group[index].execution;
        let id = execution.id.as_str();
        if waiting.contains(id) {
            rest.push((index, previous));
            continue;
        }
        match by_id.get(id) {
            Some(&unit) if units[unit].last == previous => {
                units[unit].commits.push(index);
                units[unit].last = execution.last_sequence;
            }
            Some(_) => {
                waiting.insert(id);
                rest.push((index, previous));
            }
            None => {
                by_id.insert(id, units.len());
                units.push(Unit {
                    commits: vec![index],
                    previous,
                    last: execution.last_sequence,
                });
            }
        }
    }
    (units, rest)
}

/// Runs [`WRITE_ROUND`] for `units` (in cluster mode, [`WRITE_ROUND_FENCED`] for those whose
/// partition `fence` says this kernel holds; `offset` events of the same transaction came
/// before); returns how each unit's write ended.
async fn write_round(
    connection: &mut PgConnection,
    group: &[Commit],
    units: &[Unit],
    fence: Option<&dyn PartitionFence>,
    offset: i64,
) -> Result<Vec<Outcome>, StoreError> {
    let Some(fence) = fence else {
        let written = write_unfenced(connection, group, units).await?;
        return Ok(written
            .into_iter()
            .map(|written| {
                if written {
                    Outcome::Written
                } else {
                    Outcome::Conflict
                }
            })
            .collect());
    };
    let mut outcomes = vec![Outcome::Conflict; units.len()];
    let mut sent = Vec::with_capacity(units.len());
    let mut sent_units = Vec::with_capacity(units.len());
    let mut partitions = Vec::with_capacity(units.len());
    let mut epochs = Vec::with_capacity(units.len());
    for (index, unit) in units.iter().enumerate() {
        let id = group[unit.commits[0]].execution.id.as_str();
        let partition = partition_of(id, fence.partitions());
        match (fence.epoch(partition), i32::try_from(partition)) {
            (Some(epoch), Ok(column)) => {
                sent.push(index);
                sent_units.push(unit.clone());
                partitions.push(column);
                epochs.push(epoch);
            }
            _ => {
                fence.refused(partition);
                outcomes[index] = Outcome::Fenced(partition);
            }
        }
    }
    if sent.is_empty() {
        return Ok(outcomes);
    }
    let units = &sent_units;
    if offset.saturating_add(events_in(group, units)) > EVENTS_PER_TRANSACTION {
        return Err(StoreError::Internal(format!(
            "a transaction may write at most {EVENTS_PER_TRANSACTION} events in cluster mode"
        )));
    }
    let rows = ExecutionColumns::new(group, units)?;
    let labels = LabelColumns::new(group, units);
    let events = EventColumns::new(group, units)?;
    let steps = StepColumns::new(group, units);
    let answered: Vec<(String, bool)> = sqlx::query_as(WRITE_ROUND_FENCED.as_str())
        .bind(rows.id)
        .bind(rows.agent_id)
        .bind(rows.status)
        .bind(rows.labels)
        .bind(rows.input)
        .bind(rows.output)
        .bind(rows.created_at)
        .bind(rows.updated_at)
        .bind(rows.session_id)
        .bind(rows.consumer_id)
        .bind(rows.last_sequence)
        .bind(rows.previous)
        .bind(labels.execution_id)
        .bind(labels.key)
        .bind(labels.value)
        .bind(events.id)
        .bind(events.execution_id)
        .bind(events.sequence)
        .bind(events.step_id)
        .bind(events.event_type)
        .bind(events.schema_version)
        .bind(events.timestamp)
        .bind(events.payload)
        .bind(events.causation_id)
        .bind(events.correlation_id)
        .bind(events.idempotency_key)
        .bind(events.principal)
        .bind(steps.id)
        .bind(steps.execution_id)
        .bind(steps.tool_id)
        .bind(steps.status)
        .bind(steps.attempt)
        .bind(steps.max_attempts)
        .bind(steps.remote)
        .bind(steps.job_id)
        .bind(steps.runner_id)
        .bind(steps.deadline)
        .bind(steps.updated_at)
        .bind(&partitions)
        .bind(&epochs)
        .bind(offset)
        .fetch_all(&mut *connection)
        .await
        .map_err(map_sqlx_error)?;
    let answered: HashMap<&str, bool> = answered
        .iter()
        .map(|(id, written)| (id.as_str(), *written))
        .collect();
    for ((index, unit), partition) in sent.iter().zip(units).zip(&partitions) {
        let id = group[unit.commits[0]].execution.id.as_str();
        outcomes[*index] = match answered.get(id) {
            Some(true) => Outcome::Written,
            Some(false) => {
                let partition = u32::try_from(*partition).unwrap_or_default();
                fence.refused(partition);
                Outcome::Fenced(partition)
            }
            None => Outcome::Conflict,
        };
    }
    Ok(outcomes)
}

/// Runs [`WRITE_ROUND`] for `units`; returns, per unit, whether it was written.
async fn write_unfenced(
    connection: &mut PgConnection,
    group: &[Commit],
    units: &[Unit],
) -> Result<Vec<bool>, StoreError> {
    let rows = ExecutionColumns::new(group, units)?;
    let labels = LabelColumns::new(group, units);
    let events = EventColumns::new(group, units)?;
    let steps = StepColumns::new(group, units);
    let written: Vec<String> = sqlx::query_scalar(WRITE_ROUND)
        .bind(rows.id)
        .bind(rows.agent_id)
        .bind(rows.status)
        .bind(rows.labels)
        .bind(rows.input)
        .bind(rows.output)
        .bind(rows.created_at)
        .bind(rows.updated_at)
        .bind(rows.session_id)
        .bind(rows.consumer_id)
        .bind(rows.last_sequence)
        .bind(rows.previous)
        .bind(labels.execution_id)
        .bind(labels.key)
        .bind(labels.value)
        .bind(events.id)
        .bind(events.execution_id)
        .bind(events.sequence)
        .bind(events.step_id)
        .bind(events.event_type)
        .bind(events.schema_version)
        .bind(events.timestamp)
        .bind(events.payload)
        .bind(events.causation_id)
        .bind(events.correlation_id)
        .bind(events.idempotency_key)
        .bind(events.principal)
        .bind(steps.id)
        .bind(steps.execution_id)
        .bind(steps.tool_id)
        .bind(steps.status)
        .bind(steps.attempt)
        .bind(steps.max_attempts)
        .bind(steps.remote)
        .bind(steps.job_id)
        .bind(steps.runner_id)
        .bind(steps.deadline)
        .bind(steps.updated_at)
        .fetch_all(&mut *connection)
        .await
        .map_err(map_sqlx_error)?;
    let written: HashSet<&str> = written.iter().map(String::as_str).collect();
    Ok(units
        .iter()
        .map(|unit| written.contains(group[unit.commits[0]].execution.id.as_str()))
        .collect())
}
/// Deletes up to `limit` terminal executions last updated before `before` (RFC 3339), oldest
/// first, with all their rows, in one transaction; returns how many were deleted.
pub(super) async fn delete_terminal_before(
    connection: &mut PgConnection,
    before: &str,
    limit: i64,
) -> Result<u64, StoreError> {
    // `finished_at` is `updated_at` once terminal (migration 0007), over `executions_finished`.
    let select = "SELECT id FROM executions WHERE finished_at IS NOT NULL \
         AND finished_at < $1::timestamptz ORDER BY finished_at, id LIMIT $2";
    let mut transaction = connection.begin().await.map_err(map_sqlx_error)?;
    let ids = sqlx::query_scalar::<_, String>(select)
        .bind(before)
        .bind(limit)
        .fetch_all(&mut *transaction)
        .await
        .map_err(map_sqlx_error)?;
    if ids.is_empty() {
        transaction.rollback().await.map_err(map_sqlx_error)?;
        return Ok(0);
    }
    // Children first: the foreign keys point at `executions`.
    let deletes = [
        "DELETE FROM events WHERE execution_id = ANY($1)",
        "DELETE FROM execution_labels WHERE execution_id = ANY($1)",
        "DELETE FROM steps WHERE execution_id = ANY($1)",
        "DELETE FROM executions WHERE id = ANY($1)",
    ];
    for delete in deletes {
        sqlx::query(delete)
            .bind(&ids)
            .execute(&mut *transaction)
            .await
            .map_err(map_sqlx_error)?;
    }
    transaction.commit().await.map_err(map_sqlx_error)?;
    Ok(ids.len() as u64)
}

#[cfg(test)]
mod fence_tests {
    use super::*;

    #[test]
    fn the_fenced_statement_applies_every_rewrite() {
        let fenced = WRITE_ROUND_FENCED.as_str();
        for part in [
            "$39::int4[], $40::int8[]) AS b (",
            "WHERE p.id = ANY($39::int4[]) FOR SHARE), bf AS (",
            "last_sequence, partition) SELECT id,",
            "last_sequence, partition FROM bf AS b WHERE previous = 0",
            "FROM bf AS b WHERE b.previous <> 0",
            "idempotency_key, principal, epoch, position) SELECT v.id,",
            "(SELECT bf.epoch FROM bf WHERE bf.id = v.execution_id), \
             (pg_current_xact_id()::text::int8 << 20) + $41::int8 + v.ordinal FROM UNNEST(",
            "SELECT id, true FROM written UNION ALL SELECT id, false FROM b",
        ] {
            assert!(fenced.contains(part), "missing {part:?} in {fenced}");
        }
        assert!(!fenced.contains("FROM b WHERE previous = 0"));
    }
}
