//! PostgreSQL writes of commit groups, on the writer connection. Called by `PostgresStore`;
//! the statement's text is in `super::round_sql`, retention in `super::retention`.
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
use super::columns::{EventColumns, ExecutionColumns, LabelColumns, StepColumns, event_epochs};
use super::round_sql::{WRITE_ROUND, WRITE_ROUND_FENCED};

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
    let event_epochs = event_epochs(group, units, &epochs);
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
        .bind(&event_epochs)
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
