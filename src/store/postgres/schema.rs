//! What a PostgreSQL session and the schema need: the session settings of every connection,
//! the embedded migrations and their check at open, and the column lists of the reads (with
//! timestamps rendered as the text `rows.rs` parses).

use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgConnection};

use keel_actors::error::StoreError;

use super::super::{StoreOptions, map_sqlx_error, migrate_error, refuse_newer_schema};

/// Migrations embedded in the binary, applied at open.
pub(super) static MIGRATOR: Migrator = sqlx::migrate!("migrations/postgres");

/// Renders a `TIMESTAMPTZ` column as the RFC 3339 text `rows.rs` parses (six fractional digits,
/// `Z`), independent of the session time zone.
macro_rules! utc_text {
    ($column:literal) => {
        concat!(
            "to_char(",
            $column,
            " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"
        )
    };
}

/// Columns of `events` in the shape `EventRecord` reads.
pub(super) const EVENT_COLUMNS: &str = concat!(
    "id, execution_id, sequence, step_id, type AS event_type, schema_version, ",
    utc_text!("timestamp"),
    " AS timestamp, payload::text AS payload, causation_id, correlation_id, idempotency_key, principal"
);

/// Columns of `executions` in the shape `ExecutionRecord` reads.
pub(super) const EXECUTION_COLUMNS: &str = concat!(
    "id, agent_id, status, labels::text AS labels, input::text AS input, ",
    "output::text AS output, ",
    utc_text!("created_at"),
    " AS created_at, ",
    utc_text!("updated_at"),
    " AS updated_at, session_id, consumer_id, last_sequence"
);

/// Columns of `steps` in the shape `StepRecord` reads.
#[cfg(test)]
pub(super) const STEP_COLUMNS: &str = concat!(
    "id, execution_id, tool_id, status, attempt, max_attempts, remote, job_id, runner_id, ",
    utc_text!("deadline"),
    " AS deadline, ",
    utc_text!("updated_at"),
    " AS updated_at"
);

/// `executions.created_at` of the recovery query (alias `e`), as text.
pub(super) const RECOVERY_CREATED_AT: &str = utc_text!("e.created_at");

/// Server-side TCP keepalive of every session (`tcp_keepalives_idle`, `_interval`, `_count`):
/// the server probes a connection idle for 10 s every 5 s and ends the session after 3 probes
/// go unanswered. Without it a kernel whose host died (no FIN, no RST) leaves its writer
/// session open, still holding the one-kernel lock, until the OS default of two hours runs
/// out, and every replacement kernel is refused until then; with it, within about 25 s.
/// (Ignored on Unix-socket connections, where a dead peer is seen at once.)
const TCP_KEEPALIVE: [(&str, &str); 3] = [
    ("tcp_keepalives_idle", "10"),
    ("tcp_keepalives_interval", "5"),
    ("tcp_keepalives_count", "3"),
];

/// Adds the settings every session gets: an application name (unless the URL sets one), the
/// server-side timeouts, so a statement or an abandoned transaction cannot hold the database,
/// and the server-side keepalive ([`TCP_KEEPALIVE`]), so a session whose client vanished
/// cannot hold the kernel lock for long.
pub(super) fn with_session_settings(
    base: PgConnectOptions,
    options: &StoreOptions,
) -> PgConnectOptions {
    let named = if base.get_application_name().is_some() {
        base
    } else {
        base.application_name("keel")
    };
    let statement_ms = options.statement_timeout.as_millis().max(1).to_string();
    let idle_ms = (options.statement_timeout * 2)
        .as_millis()
        .max(1)
        .to_string();
    named
        .options([
            ("statement_timeout", statement_ms),
            ("idle_in_transaction_session_timeout", idle_ms),
        ])
        .options(TCP_KEEPALIVE)
}

/// Adds the writer connection's own setting: no sequential scans where an index serves. The
/// writer runs one group-commit statement over and over, and PostgreSQL keeps a generic plan
/// for it made from the statistics of the moment it was cached: on a new database (an empty
/// `executions`), a hash join over a sequential scan of `executions`, which then read the whole
/// table on every commit as it grew (3 181 scans of 12.2 million rows in a 10 s run). Every
/// statement of the writer has an index path (the primary keys, `events (execution_id,
/// sequence)`, the retention index), so this only rules the scans out.
pub(super) fn writer_settings(base: PgConnectOptions) -> PgConnectOptions {
    base.options([("enable_seqscan", "off")])
}

/// Refuses a schema newer than this binary, then applies the embedded migrations (with no
/// statement timeout: a migration may rewrite a large table). sqlx serialises concurrent
/// migrators with an advisory lock of its own.
pub(super) async fn migrate(connection: &mut PgConnection) -> Result<(), StoreError> {
    refuse_newer_schema(applied_schema_version(connection).await?, &MIGRATOR)?;
    sqlx::query("SET statement_timeout = 0")
        .execute(&mut *connection)
        .await
        .map_err(map_sqlx_error)?;
    MIGRATOR
        .run_direct(&mut *connection)
        .await
        .map_err(migrate_error)?;
    sqlx::query("RESET statement_timeout")
        .execute(&mut *connection)
        .await
        .map_err(map_sqlx_error)?;
    Ok(())
}

/// Returns the newest migration version applied to the database, if it was ever migrated.
async fn applied_schema_version(connection: &mut PgConnection) -> Result<Option<i64>, StoreError> {
    let table =
        sqlx::query_scalar::<_, Option<String>>("SELECT to_regclass('_sqlx_migrations')::text")
            .fetch_one(&mut *connection)
            .await
            .map_err(map_sqlx_error)?;
    if table.is_none() {
        return Ok(None);
    }
    sqlx::query_scalar::<_, Option<i64>>("SELECT MAX(version) FROM _sqlx_migrations")
        .fetch_one(&mut *connection)
        .await
        .map_err(map_sqlx_error)
}
