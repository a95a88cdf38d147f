//! The SQL of PostgreSQL writes: a commit batch in one transaction, and retention. Called by
//! `PostgresStore` on the writer connection.
//!
//! A batch costs one statement per execution (its projection row, which also checks the
//! sequence) plus one statement each for all new labels, all events and all steps of the
//! batch (`UNNEST` of arrays), so group commits stay cheap on a remote server. Events are
//! inserted in batch order, so their positions follow it.

use std::collections::HashMap;

use sqlx::Connection;
use sqlx::postgres::PgConnection;

use keel_actors::error::StoreError;
use keel_actors::store::Commit;

use super::super::rows::{EventRecord, ExecutionRecord, StepRecord};
use super::super::{
    TERMINAL_STATUSES_SQL, expected_previous_sequence, map_sqlx_error, sequence_conflict,
};

/// A checked commit batch in the shape the statements bind.
pub(super) struct BatchPlan<'a> {
    executions: Vec<(&'a Commit, ExecutionRecord, i64)>,
    labels: Vec<(String, String, String)>,
    events: Vec<EventRecord>,
    steps: Vec<StepRecord>,
}

impl<'a> BatchPlan<'a> {
    /// Checks every commit (a failure is a caller bug, `Internal`) and converts it to records.
    /// A step changed twice in the batch keeps its last state, as consecutive upserts would.
    pub fn new(batch: &'a [Commit]) -> Result<Self, StoreError> {
        let mut plan = Self {
            executions: Vec::with_capacity(batch.len()),
            labels: Vec::new(),
            events: Vec::new(),
            steps: Vec::new(),
        };
        let mut step_index: HashMap<String, usize> = HashMap::new();
        for commit in batch {
            let previous_sequence = expected_previous_sequence(commit)?;
            let record = ExecutionRecord::from_row(&commit.execution)?;
            if previous_sequence == 0 {
                for (key, value) in commit.execution.labels.iter().flatten() {
                    plan.labels
                        .push((record.id.clone(), key.clone(), value.clone()));
                }
            }
            plan.executions.push((commit, record, previous_sequence));
            for event in &commit.events {
                plan.events.push(EventRecord::from_event(event)?);
            }
            for step in &commit.steps {
                let record = StepRecord::from_step(step);
                match step_index.get(&record.id) {
                    Some(&index) => plan.steps[index] = record,
                    None => {
                        step_index.insert(record.id.clone(), plan.steps.len());
                        plan.steps.push(record);
                    }
                }
            }
        }
        Ok(plan)
    }
}

/// Writes a checked batch in one transaction: all or nothing.
pub(super) async fn write_batch(
    connection: &mut PgConnection,
    plan: &BatchPlan<'_>,
) -> Result<(), StoreError> {
    let mut transaction = connection.begin().await.map_err(map_sqlx_error)?;
    match write_rows(&mut transaction, plan).await {
        Ok(()) => transaction.commit().await.map_err(map_sqlx_error),
        // A broken connection is dropped by the caller, which ends the transaction server-side.
        Err(error @ StoreError::Unavailable(_)) => Err(error),
        Err(error) => {
            // A failed rollback means the connection is in doubt: report that instead.
            transaction.rollback().await.map_err(map_sqlx_error)?;
            Err(error)
        }
    }
}

/// The statements of [`write_batch`], inside its transaction.
async fn write_rows(connection: &mut PgConnection, plan: &BatchPlan<'_>) -> Result<(), StoreError> {
    for (commit, record, previous_sequence) in &plan.executions {
        if !write_execution(connection, record, *previous_sequence).await? {
            return Err(sequence_conflict(
                &commit.execution.id,
                previous_sequence + 1,
            ));
        }
    }
    if !plan.labels.is_empty() {
        insert_labels(connection, &plan.labels).await?;
    }
    if !plan.events.is_empty() {
        insert_events(connection, &plan.events).await?;
    }
    if !plan.steps.is_empty() {
        upsert_steps(connection, &plan.steps).await?;
    }
    Ok(())
}

/// Inserts (when `previous_sequence` is 0) or updates the projection row of one execution,
/// only if its stored last sequence is `previous_sequence`; returns whether a row was written.
async fn write_execution(
    connection: &mut PgConnection,
    execution: &ExecutionRecord,
    previous_sequence: i64,
) -> Result<bool, StoreError> {
    let written = if previous_sequence == 0 {
        sqlx::query(
            "INSERT INTO executions (id, agent_id, status, labels, input, output, created_at, \
             updated_at, session_id, consumer_id, last_sequence) \
             VALUES ($1, $2, $3, $4::json, $5::json, $6::json, $7::timestamptz, \
             $8::timestamptz, $9, $10, $11) \
             ON CONFLICT (id) DO NOTHING",
        )
        .bind(&execution.id)
        .bind(&execution.agent_id)
        .bind(&execution.status)
        .bind(&execution.labels)
        .bind(&execution.input)
        .bind(&execution.output)
        .bind(&execution.created_at)
        .bind(&execution.updated_at)
        .bind(&execution.session_id)
        .bind(&execution.consumer_id)
        .bind(execution.last_sequence)
        .execute(&mut *connection)
        .await
    } else {
        // agent_id, labels, input and created_at are fixed at creation and never rewritten.
        sqlx::query(
            "UPDATE executions SET status = $1, output = $2::json, \
             updated_at = $3::timestamptz, session_id = $4, consumer_id = $5, \
             last_sequence = $6 WHERE id = $7 AND last_sequence = $8",
        )
        .bind(&execution.status)
        .bind(&execution.output)
        .bind(&execution.updated_at)
        .bind(&execution.session_id)
        .bind(&execution.consumer_id)
        .bind(execution.last_sequence)
        .bind(&execution.id)
        .bind(previous_sequence)
        .execute(&mut *connection)
        .await
    };
    Ok(written.map_err(map_sqlx_error)?.rows_affected() == 1)
}

/// Inserts the label rows of newly created executions.
async fn insert_labels(
    connection: &mut PgConnection,
    labels: &[(String, String, String)],
) -> Result<(), StoreError> {
    let (ids, (keys, values)): (Vec<&str>, (Vec<&str>, Vec<&str>)) = labels
        .iter()
        .map(|(id, key, value)| (id.as_str(), (key.as_str(), value.as_str())))
        .unzip();
    sqlx::query(
        "INSERT INTO execution_labels (execution_id, key, value) \
         SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[])",
    )
    .bind(ids)
    .bind(keys)
    .bind(values)
    .execute(&mut *connection)
    .await
    .map_err(map_sqlx_error)?;
    Ok(())
}

/// Appends events to the log in the given order.
async fn insert_events(
    connection: &mut PgConnection,
    events: &[EventRecord],
) -> Result<(), StoreError> {
    let column = |get: fn(&EventRecord) -> &str| events.iter().map(get).collect::<Vec<_>>();
    let optional =
        |get: fn(&EventRecord) -> Option<&str>| events.iter().map(get).collect::<Vec<_>>();
    let number = |get: fn(&EventRecord) -> i64| events.iter().map(get).collect::<Vec<_>>();
    sqlx::query(
        "INSERT INTO events (id, execution_id, sequence, step_id, type, schema_version, \
         timestamp, payload, causation_id, correlation_id, idempotency_key) \
         SELECT b.id, b.execution_id, b.sequence, b.step_id, b.type, b.schema_version, \
         b.ts::timestamptz, b.payload::json, b.causation_id, b.correlation_id, b.key \
         FROM UNNEST($1::text[], $2::text[], $3::int8[], $4::text[], $5::text[], $6::int8[], \
         $7::text[], $8::text[], $9::text[], $10::text[], $11::text[]) WITH ORDINALITY \
         AS b (id, execution_id, sequence, step_id, type, schema_version, ts, payload, \
         causation_id, correlation_id, key, ordinal) \
         ORDER BY b.ordinal",
    )
    .bind(column(|event| &event.id))
    .bind(column(|event| &event.execution_id))
    .bind(number(|event| event.sequence))
    .bind(optional(|event| event.step_id.as_deref()))
    .bind(column(|event| &event.event_type))
    .bind(number(|event| event.schema_version))
    .bind(column(|event| &event.timestamp))
    .bind(column(|event| &event.payload))
    .bind(column(|event| &event.causation_id))
    .bind(column(|event| &event.correlation_id))
    .bind(optional(|event| event.idempotency_key.as_deref()))
    .execute(&mut *connection)
    .await
    .map_err(map_sqlx_error)?;
    Ok(())
}

/// Inserts or replaces the projection rows of steps (each id at most once).
async fn upsert_steps(
    connection: &mut PgConnection,
    steps: &[StepRecord],
) -> Result<(), StoreError> {
    let column = |get: fn(&StepRecord) -> &str| steps.iter().map(get).collect::<Vec<_>>();
    let optional = |get: fn(&StepRecord) -> Option<&str>| steps.iter().map(get).collect::<Vec<_>>();
    let number = |get: fn(&StepRecord) -> i64| steps.iter().map(get).collect::<Vec<_>>();
    let remote: Vec<bool> = steps.iter().map(|step| step.remote).collect();
    sqlx::query(
        "INSERT INTO steps (id, execution_id, tool_id, status, attempt, max_attempts, remote, \
         job_id, runner_id, deadline, updated_at) \
         SELECT b.id, b.execution_id, b.tool_id, b.status, b.attempt, b.max_attempts, \
         b.remote, b.job_id, b.runner_id, b.deadline::timestamptz, b.updated_at::timestamptz \
         FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::int8[], $6::int8[], \
         $7::bool[], $8::text[], $9::text[], $10::text[], $11::text[]) \
         AS b (id, execution_id, tool_id, status, attempt, max_attempts, remote, job_id, \
         runner_id, deadline, updated_at) \
         ON CONFLICT (id) DO UPDATE SET tool_id = excluded.tool_id, \
         status = excluded.status, attempt = excluded.attempt, \
         max_attempts = excluded.max_attempts, remote = excluded.remote, \
         job_id = excluded.job_id, runner_id = excluded.runner_id, \
         deadline = excluded.deadline, updated_at = excluded.updated_at",
    )
    .bind(column(|step| &step.id))
    .bind(column(|step| &step.execution_id))
    .bind(column(|step| &step.tool_id))
    .bind(column(|step| &step.status))
    .bind(number(|step| step.attempt))
    .bind(number(|step| step.max_attempts))
    .bind(remote)
    .bind(optional(|step| step.job_id.as_deref()))
    .bind(optional(|step| step.runner_id.as_deref()))
    .bind(optional(|step| step.deadline.as_deref()))
    .bind(column(|step| &step.updated_at))
    .execute(&mut *connection)
    .await
    .map_err(map_sqlx_error)?;
    Ok(())
}

/// Deletes up to `limit` terminal executions last updated before `before` (RFC 3339), oldest
/// first, with all their rows, in one transaction; returns how many were deleted.
pub(super) async fn delete_terminal_before(
    connection: &mut PgConnection,
    before: &str,
    limit: i64,
) -> Result<u64, StoreError> {
    let select = format!(
        "SELECT id FROM executions WHERE status IN {TERMINAL_STATUSES_SQL} \
         AND updated_at < $1::timestamptz ORDER BY updated_at, id LIMIT $2"
    );
    let mut transaction = connection.begin().await.map_err(map_sqlx_error)?;
    let ids = sqlx::query_scalar::<_, String>(&select)
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
