//! Kernel-level outage tests: a kernel under load loses its database, through a TCP proxy in
//! front of PostgreSQL that is closed, or a SQLite file locked by another connection
//! (`BEGIN EXCLUSIVE`). `/v0/ready` must answer 503 `SERVICE_UNAVAILABLE` within 2 s, writes
//! must answer 503 (never 500, never a hang) and change nothing; when the database returns the
//! kernel must recover by itself within 5 s, lose no acknowledged event and keep every
//! execution's sequences contiguous. The PostgreSQL test needs `KEEL_TEST_POSTGRES_URL` and
//! says so on stderr when it is not set. Measured timings go to stderr.

mod assignment;
mod load;
mod proxy;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::{Connection, SqliteConnection};
use tokio::time::Instant;

use crate::backend::{POSTGRES_ENV, TestStore, postgres_admin_url};
use crate::harness::{Options, TestKernel, assert_error, eventually, running_execution};
use load::{LOAD_AGENT, Load};
use proxy::Proxy;

/// `/v0/ready` must report the outage within this bound.
const READY_BOUND: Duration = Duration::from_secs(2);
/// The kernel must serve again within this bound after the database returns.
const RECOVERY_BOUND: Duration = Duration::from_secs(5);
/// Agent id of the creates refused during the outage (none may exist afterwards).
const REFUSED_AGENT: &str = "outage-refused";
/// How long the database stays away (at least).
const OUTAGE: Duration = Duration::from_secs(3);
/// How long the executions of the load may take to finish after the recovery.
const DRAIN: Duration = Duration::from_secs(30);

/// How the database is taken away.
enum Fault {
    /// The kernel reaches PostgreSQL through this proxy, which is closed.
    Proxy(Proxy),
    /// Another connection holds `BEGIN EXCLUSIVE` on this SQLite file.
    SqliteLock {
        path: PathBuf,
        holder: Option<SqliteConnection>,
    },
}

impl Fault {
    async fn inject(&mut self) {
        match self {
            Self::Proxy(proxy) => proxy.close().await,
            Self::SqliteLock { path, holder } => {
                let mut connection =
                    SqliteConnection::connect(&format!("sqlite://{}", path.display()))
                        .await
                        .expect("second connection to the file");
                sqlx::query("BEGIN EXCLUSIVE")
                    .execute(&mut connection)
                    .await
                    .expect("exclusive lock");
                *holder = Some(connection);
            }
        }
    }

    async fn heal(&mut self) {
        match self {
            Self::Proxy(proxy) => proxy.reopen(),
            Self::SqliteLock { holder, .. } => {
                let mut connection = holder.take().expect("lock held");
                sqlx::query("ROLLBACK")
                    .execute(&mut connection)
                    .await
                    .expect("release the lock");
                let _ = connection.close().await;
            }
        }
    }
}

/// Starts a kernel on a fresh PostgreSQL database reached through a proxy, or says on stderr
/// that `test` is skipped when `KEEL_TEST_POSTGRES_URL` is not set.
async fn kernel_behind_proxy(test: &str) -> Option<(TestKernel, Fault)> {
    let Some(admin_url) = postgres_admin_url() else {
        let _ = writeln!(std::io::stderr(), "{test} skipped: {POSTGRES_ENV} not set");
        return None;
    };
    let store = TestStore::postgres(&admin_url, "keel_test").await;
    let proxy = Proxy::start(store.postgres_server().expect("server address"));
    let store = store.connect_via(proxy.address.port());
    let kernel = TestKernel::start_on(Options::default(), store).await;
    Some((kernel, Fault::Proxy(proxy)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_outage_answers_503_and_the_kernel_recovers_by_itself() {
    let test = "postgres proxy closed";
    let Some((kernel, fault)) = kernel_behind_proxy(test).await else {
        return;
    };
    outage_then_recovery(test, kernel, fault).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_sqlite_file_answers_503_and_the_kernel_recovers_by_itself() {
    let kernel = TestKernel::start_on(Options::default(), TestStore::sqlite()).await;
    let path = kernel.store.sqlite_path().expect("sqlite file");
    let fault = Fault::SqliteLock { path, holder: None };
    outage_then_recovery("sqlite locked", kernel, fault).await;
}

/// The scenario shared by both backends.
async fn outage_then_recovery(test: &str, kernel: TestKernel, mut fault: Fault) {
    // An execution outside the load whose log must not change during the outage.
    let (_probe_agent, probe) = running_execution(&kernel, "outage-probe").await;
    let before = kernel.events(&probe.execution_id).await;
    let load = Load::start(&kernel.client, &kernel.base_url);
    eventually("load before the outage", || async {
        let ledger = load.ledger.lock().expect("ledger");
        (ledger.created.len() >= 20 && ledger.intents.len() >= 10).then_some(())
    })
    .await;

    fault.inject().await;
    let broken = Instant::now();
    let ready = ready_answers(
        &kernel,
        StatusCode::SERVICE_UNAVAILABLE,
        broken + READY_BOUND,
    )
    .await;
    report(test, "ready answers 503 after", ready);
    let refused_body = json!({ "agent_id": REFUSED_AGENT, "input": {} });
    let refused_intent = json!({ "type": "invoke_tool", "tool_id": "outage.tool",
                                 "arguments": {}, "idempotency_key": "during-outage" });
    let writes = Instant::now();
    let (create, intent) = tokio::join!(
        kernel.post("/v0/executions", &refused_body),
        probe.intent(&kernel, refused_intent)
    );
    assert_error(
        &create,
        StatusCode::SERVICE_UNAVAILABLE,
        "SERVICE_UNAVAILABLE",
        None,
    );
    assert_error(
        &intent,
        StatusCode::SERVICE_UNAVAILABLE,
        "SERVICE_UNAVAILABLE",
        None,
    );
    report(
        test,
        "refused create and intent answered in",
        writes.elapsed(),
    );
    // The load keeps hitting the outage for a while: commits fail, actors are rebuilt.
    tokio::time::sleep_until(broken + OUTAGE).await;
    eventually("the load to see a 503", || async {
        (load.ledger.lock().expect("ledger").unavailable >= 1).then_some(())
    })
    .await;

    fault.heal().await;
    let healed = Instant::now();
    let deadline = healed + RECOVERY_BOUND;
    let ready = ready_answers(&kernel, StatusCode::OK, deadline).await;
    report(test, "ready answers 200 after", ready);
    let after_body = json!({ "agent_id": "outage-after", "input": {} });
    let created = write_succeeds(deadline, || kernel.post("/v0/executions", &after_body)).await;
    assert_eq!(created["status"], "pending", "{created}");
    let invoke = json!({ "type": "invoke_tool", "tool_id": "outage.tool", "arguments": {},
                         "idempotency_key": "after-outage" });
    let accepted = write_succeeds(deadline, || probe.intent(&kernel, invoke.clone())).await;
    assert_eq!(accepted["accepted"], true, "{accepted}");
    report(test, "writes succeed again after", healed.elapsed());

    // The refused writes changed nothing.
    let (status, refused) = kernel
        .get(&format!("/v0/executions?agent_id={REFUSED_AGENT}"))
        .await;
    assert_eq!(status, StatusCode::OK, "{refused}");
    assert_eq!(
        refused["executions"],
        json!([]),
        "a refused create was stored"
    );
    let after = kernel.events(&probe.execution_id).await;
    assert_eq!(
        after[..before.len()],
        before[..],
        "the probe's history changed"
    );
    let added = &after[before.len()..];
    assert!(
        added.iter().any(|event| {
            event["type"] == "step.created" && event["step_id"] == accepted["step_id"]
        }),
        "the intent accepted after the recovery has no step: {added:?}"
    );
    assert!(
        after
            .iter()
            .all(|event| event["idempotency_key"] != "during-outage"),
        "the refused intent was stored"
    );
    assert_contiguous(&probe.execution_id, &after);

    // The load makes progress again, then finishes everything it created.
    let intents_at_heal = load.ledger.lock().expect("ledger").intents.len();
    eventually("load progress after the recovery", || async {
        (load.ledger.lock().expect("ledger").intents.len() > intents_at_heal).then_some(())
    })
    .await;
    load.stop_creating();
    let acknowledged = load.ledger.lock().expect("ledger").created.clone();
    let statuses = all_finished(&kernel, &acknowledged).await;
    let ledger = load.stop().await;
    assert!(
        ledger.violations.is_empty(),
        "answers other than 2xx or 503: {:?}",
        ledger.violations
    );
    for id in &ledger.created {
        assert_eq!(
            statuses.get(id).map(String::as_str),
            Some("completed"),
            "acknowledged execution {id}"
        );
    }
    for id in statuses.keys() {
        let log = kernel.events(id).await;
        assert_contiguous(id, &log);
        for (execution, step) in ledger
            .intents
            .iter()
            .filter(|(execution, _)| execution == id)
        {
            assert!(
                log.iter()
                    .any(|event| event["type"] == "step.created" && event["step_id"] == *step),
                "acknowledged intent lost: {execution} step {step}"
            );
        }
    }
    for id in &ledger.completed {
        assert!(
            statuses.contains_key(id),
            "acknowledged completion lost: {id}"
        );
    }
    let _ = writeln!(
        std::io::stderr(),
        "outage [{test}]: {} creates, {} intents, {} completions acknowledged; {} answers 503",
        ledger.created.len(),
        ledger.intents.len(),
        ledger.completed.len(),
        ledger.unavailable
    );
    kernel.shutdown().await;
}

/// Polls `/v0/ready` until it answers `want` (a 503 must be the error envelope); fails when
/// `deadline` passes first. Returns the time since the fault changed.
async fn ready_answers(kernel: &TestKernel, want: StatusCode, deadline: Instant) -> Duration {
    let since = deadline
        - if want == StatusCode::OK {
            RECOVERY_BOUND
        } else {
            READY_BOUND
        };
    loop {
        let answer = kernel.get("/v0/ready").await;
        if answer.0 == want {
            if want == StatusCode::SERVICE_UNAVAILABLE {
                assert_error(&answer, want, "SERVICE_UNAVAILABLE", None);
            }
            let now = Instant::now();
            assert!(
                now <= deadline,
                "/v0/ready answered {want} only after {:?}",
                now - since
            );
            return now - since;
        }
        assert!(
            Instant::now() < deadline,
            "/v0/ready still answers {} {}",
            answer.0,
            answer.1
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Retries a write answered 503 until it is acknowledged, failing at `deadline`.
async fn write_succeeds<F, Fut>(deadline: Instant, mut write: F) -> Value
where
    F: FnMut() -> Fut,
    Fut: Future<Output = (StatusCode, Value)>,
{
    loop {
        let (status, body) = write().await;
        if status.is_success() {
            return body;
        }
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert!(Instant::now() < deadline, "writes still fail: {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until every execution of the load is finished; returns their statuses.
async fn all_finished(
    kernel: &TestKernel,
    acknowledged: &BTreeSet<String>,
) -> BTreeMap<String, String> {
    let deadline = Instant::now() + DRAIN;
    loop {
        let statuses = statuses(kernel, LOAD_AGENT).await;
        let open: Vec<_> = statuses
            .iter()
            .filter(|(_, status)| status.as_str() != "completed")
            .map(|(id, status)| (id, status, acknowledged.contains(id)))
            .collect();
        if open.is_empty() {
            return statuses;
        }
        assert!(
            Instant::now() < deadline,
            "executions not finished (id, status, create acknowledged): {open:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Returns the status of every execution of `agent_id`, paging through the list.
async fn statuses(kernel: &TestKernel, agent_id: &str) -> BTreeMap<String, String> {
    let mut found = BTreeMap::new();
    let mut cursor = String::new();
    loop {
        let (status, page) = kernel
            .get(&format!(
                "/v0/executions?agent_id={agent_id}&limit=200&cursor={cursor}"
            ))
            .await;
        assert_eq!(status, StatusCode::OK, "{page}");
        for summary in page["executions"].as_array().expect("executions") {
            let id = summary["id"].as_str().expect("id").to_owned();
            found.insert(id, summary["status"].as_str().expect("status").to_owned());
        }
        cursor = page["next_cursor"].as_str().unwrap_or_default().to_owned();
        if cursor.is_empty() {
            return found;
        }
    }
}

/// Asserts that an execution's event sequences run 1..=n.
fn assert_contiguous(id: &str, log: &[Value]) {
    let sequences: Vec<i64> = log
        .iter()
        .map(|event| event["sequence"].as_i64().expect("sequence"))
        .collect();
    let expected: Vec<i64> = (1..=i64::try_from(log.len()).expect("length")).collect();
    assert_eq!(sequences, expected, "sequences of {id} are not contiguous");
}

/// Prints one measured timing past the test harness's capture.
fn report(test: &str, what: &str, elapsed: Duration) {
    let _ = writeln!(
        std::io::stderr(),
        "outage timing [{test}] {what}: {} ms",
        elapsed.as_millis()
    );
}
