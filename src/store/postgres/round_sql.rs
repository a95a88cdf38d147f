//! The text of the statement that writes one round of a commit group (`super::write` runs it):
//! [`WRITE_ROUND`], and [`WRITE_ROUND_FENCED`], the same statement rewritten for cluster mode.

/// The statement that writes one round; its 38 parameters are bound by `super::write`.
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
/// execution's partition (`$39`) and the epoch this kernel holds it at (`$40`), and `$42` the
/// same epoch for each event (recorded on the event); the `fence`
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
    const REWRITES: [(&str, &str); 8] = [
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
            "v.correlation_id, v.key, v.principal, v.epoch, \
             (pg_current_xact_id()::text::int8 << 20) + $41::int8 + v.ordinal \
             FROM UNNEST(",
        ),
        (
            "$27::text[]) \
             WITH ORDINALITY AS v (id, execution_id, sequence, step_id, type, schema_version, ts, \
             payload, causation_id, correlation_id, key, principal, ordinal)",
            "$27::text[], $42::int8[]) \
             WITH ORDINALITY AS v (id, execution_id, sequence, step_id, type, schema_version, ts, \
             payload, causation_id, correlation_id, key, principal, epoch, ordinal)",
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
            "v.principal, v.epoch, \
             (pg_current_xact_id()::text::int8 << 20) + $41::int8 + v.ordinal FROM UNNEST(",
            "$27::text[], $42::int8[]) WITH ORDINALITY AS v (",
            "principal, epoch, ordinal)",
            "SELECT id, true FROM written UNION ALL SELECT id, false FROM b",
        ] {
            assert!(fenced.contains(part), "missing {part:?} in {fenced}");
        }
        assert!(!fenced.contains("FROM b WHERE previous = 0"));
    }
}
