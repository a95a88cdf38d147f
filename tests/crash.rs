//! Crash-recovery test on the real binary: `keel dev` is driven over HTTP/SSE by creators and a
//! scripted agent, killed with SIGKILL mid-load, and restarted on the same data directory,
//! three times. Every operation the kernel acknowledged (2xx) must have survived: created
//! executions exist, acknowledged intents and step results have their events, every
//! execution's event sequences run 1..n without gaps, and after the last restart a fresh agent
//! finishes all pending work. A final SIGTERM must shut the kernel down cleanly.
//!
//! It prints what it measured (run with `--nocapture`): per kill, the time from spawning the
//! restarted process to `/v0/ready` answering 200, the executions its startup recovery
//! rebuilt, and the acknowledged operations checked; and the totals.
//!
//! The kernel runs on a fresh SQLite file, or with `KEEL_TEST_BACKEND=postgres` on a fresh
//! PostgreSQL database (`--db-url`) created from `KEEL_TEST_POSTGRES_URL` and dropped after.

#[path = "api/backend.rs"]
#[allow(dead_code)]
mod backend;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// Agent id of every execution in this test.
const AGENT: &str = "crash-agent";
/// Local tool calls per execution.
const TOOLS: usize = 3;
/// Kill/restart cycles.
const CYCLES: usize = 3;
/// Load duration before each kill.
const LOAD: Duration = Duration::from_millis(1200);
/// Bound of the whole test.
const TEST_BUDGET: Duration = Duration::from_secs(55);

/// What the kernel acknowledged with a 2xx.
#[derive(Default)]
struct Ledger {
    /// Created executions.
    created: BTreeSet<String>,
    /// `(execution, step)` of accepted `invoke_tool` intents.
    intents: Vec<(String, String)>,
    /// `(execution, step)` of acknowledged step results.
    results: Vec<(String, String)>,
    /// Executions whose `complete` intent was accepted.
    completed: BTreeSet<String>,
    /// Unexpected answers seen by the agent's tasks (a panic there would go unnoticed).
    violations: Vec<String>,
}

type SharedLedger = Arc<Mutex<Ledger>>;

/// A running `keel dev` process.
struct Kernel {
    child: Child,
    url: String,
    log: Arc<Mutex<Vec<String>>>,
    /// The task copying stderr into `log`; it ends at the process's end of output.
    reader: tokio::task::JoinHandle<()>,
}

impl Kernel {
    /// Starts `keel dev` on a free port with its database at `db_url` and waits for its
    /// `listening on` line.
    async fn start(data_dir: &Path, db_url: &str) -> Kernel {
        Self::start_with(data_dir, db_url, &[]).await
    }

    /// Like [`Kernel::start`] with more flags.
    async fn start_with(data_dir: &Path, db_url: &str, extra: &[&str]) -> Kernel {
        let mut child = Command::new(env!("CARGO_BIN_EXE_keel"))
            .args([
                "dev",
                "--port",
                "0",
                "--agent-timeout",
                "1s",
                "--log-level",
                "info",
                "--log-format",
                "text",
            ])
            .args(extra)
            .arg("--data-dir")
            .arg(data_dir)
            .arg("--db-url")
            .arg(db_url)
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn keel dev");
        let stderr = child.stderr.take().expect("piped stderr");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (address_tx, address_rx) = tokio::sync::oneshot::channel();
        let sink = log.clone();
        let reader = tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            let mut address_tx = Some(address_tx);
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(rest) = line.split("listening on ").nth(1)
                    && let Some(sender) = address_tx.take()
                {
                    let address = rest
                        .split_whitespace()
                        .next()
                        .unwrap_or_default()
                        .to_owned();
                    let _ = sender.send(address);
                }
                sink.lock().unwrap().push(line);
            }
        });
        let address = tokio::time::timeout(Duration::from_secs(15), address_rx)
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "keel dev did not report its address; log:\n{}",
                    log.lock().unwrap().join("\n")
                )
            })
            .expect("log reader ended before the address line");
        Kernel {
            child,
            url: format!("http://{address}"),
            log,
            reader,
        }
    }

    /// Kills the process with SIGKILL and waits for it.
    async fn kill(mut self) {
        self.child.kill().await.expect("kill -9 keel");
    }

    /// Sends SIGTERM and waits for a clean exit.
    async fn terminate(mut self) {
        let pid = self
            .child
            .id()
            .expect("running kernel has a pid")
            .to_string();
        let status = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .await
            .expect("run kill");
        assert!(status.success(), "kill -TERM failed");
        let exit = tokio::time::timeout(Duration::from_secs(15), self.child.wait())
            .await
            .expect("kernel did not stop within 15 s of SIGTERM")
            .expect("wait for kernel");
        // The process has exited; its last lines may still be on their way through the pipe.
        tokio::time::timeout(Duration::from_secs(5), self.reader)
            .await
            .expect("stderr reaches its end after the kernel exited")
            .expect("log reader");
        let log = self.log.lock().unwrap().join("\n");
        assert!(
            exit.success(),
            "kernel exited with {exit} after SIGTERM; log:\n{log}"
        );
        assert!(
            log.contains("shutdown complete"),
            "no shutdown log line; log:\n{log}"
        );
    }
}

/// POSTs JSON; returns the body of a 2xx answer, `None` otherwise (not acknowledged).
async fn post(http: &reqwest::Client, url: String, body: &Value) -> Option<Value> {
    let response = http.post(url).json(body).send().await.ok()?;
    if !response.status().is_success() {
        return None;
    }
    response.json().await.ok()
}

/// GETs JSON, panicking on any failure (used against a healthy kernel only).
async fn get(http: &reqwest::Client, url: String) -> (u16, Value) {
    let response = http
        .get(&url)
        .send()
        .await
        .unwrap_or_else(|error| panic!("GET {url}: {error}"));
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Creates executions until stopped, recording each acknowledged one.
async fn creator(
    http: reqwest::Client,
    url: String,
    ledger: SharedLedger,
    stop: CancellationToken,
) {
    let mut index = 0_u64;
    while !stop.is_cancelled() {
        index += 1;
        let body = json!({ "agent_id": AGENT, "input": { "n": index } });
        if let Some(execution) = post(&http, format!("{url}/v0/executions"), &body).await
            && let Some(id) = execution["id"].as_str()
        {
            ledger.lock().unwrap().created.insert(id.to_owned());
        }
        tokio::time::sleep(Duration::from_millis(8)).await;
    }
}

/// One agent consumer: runs every assigned execution's script until stopped.
async fn agent(
    http: reqwest::Client,
    url: String,
    consumer: String,
    ledger: SharedLedger,
    stop: CancellationToken,
) {
    let mut handlers = JoinSet::new();
    while !stop.is_cancelled() {
        let stream_url = format!("{url}/v0/agents/stream?agent_id={AGENT}&consumer_id={consumer}");
        let Ok(response) = http.get(stream_url).send().await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let mut messages = response.bytes_stream().eventsource();
        loop {
            let message = tokio::select! {
                message = messages.next() => message,
                () = stop.cancelled() => break,
            };
            let Some(Ok(message)) = message else { break };
            if message.event != "execution.assigned" {
                continue;
            }
            let data: Value = serde_json::from_str(&message.data).expect("assignment data is JSON");
            let execution = data["execution_id"]
                .as_str()
                .expect("execution_id")
                .to_owned();
            let session = data["session_id"].as_str().expect("session_id").to_owned();
            handlers.spawn(script(
                http.clone(),
                url.clone(),
                execution,
                session,
                ledger.clone(),
            ));
        }
    }
    handlers.abort_all();
}

/// Plays one execution: `TOOLS` local tool calls (intent + step result), then `complete`.
/// Gives up quietly at the first unacknowledged call (kernel killed, session gone).
async fn script(
    http: reqwest::Client,
    url: String,
    execution: String,
    session: String,
    ledger: SharedLedger,
) {
    for index in 0..TOOLS {
        tokio::time::sleep(Duration::from_millis(15)).await;
        let intent = json!({
            "execution_id": execution, "session_id": session,
            "intent": { "type": "invoke_tool", "tool_id": "crash.tool", "arguments": { "i": index },
                        "idempotency_key": format!("{execution}:{session}:{index}") },
        });
        let Some(answer) = post(&http, format!("{url}/v0/agents/intent"), &intent).await else {
            return;
        };
        let Some(step) = answer["step_id"]
            .as_str()
            .filter(|_| answer["accepted"] == true)
            .map(str::to_owned)
        else {
            ledger
                .lock()
                .unwrap()
                .violations
                .push(format!("intent of {execution} not accepted: {answer}"));
            return;
        };
        ledger
            .lock()
            .unwrap()
            .intents
            .push((execution.clone(), step.clone()));
        tokio::time::sleep(Duration::from_millis(15)).await;
        let result = json!({
            "execution_id": execution, "session_id": session, "step_id": step, "success": true, "data": { "i": index },
        });
        if post(&http, format!("{url}/v0/agents/step-result"), &result)
            .await
            .is_none()
        {
            return;
        }
        ledger
            .lock()
            .unwrap()
            .results
            .push((execution.clone(), step));
    }
    let complete = json!({ "execution_id": execution, "session_id": session, "intent": { "type": "complete", "output": { "ok": true } } });
    if post(&http, format!("{url}/v0/agents/intent"), &complete)
        .await
        .is_some()
    {
        ledger.lock().unwrap().completed.insert(execution);
    }
}

/// Returns every event of an execution, in order.
async fn events(http: &reqwest::Client, url: &str, execution: &str) -> Vec<Value> {
    let mut all = Vec::new();
    loop {
        let after = all.len();
        let (status, page) = get(
            http,
            format!("{url}/v0/executions/{execution}/events?after_sequence={after}&limit=1000"),
        )
        .await;
        assert_eq!(status, 200, "events of {execution}: {page}");
        let batch = page["events"].as_array().cloned().unwrap_or_default();
        if batch.is_empty() {
            return all;
        }
        all.extend(batch);
    }
}

/// Returns the ids of every execution the kernel knows.
async fn all_executions(http: &reqwest::Client, url: &str) -> BTreeMap<String, String> {
    let mut found = BTreeMap::new();
    let mut cursor = String::new();
    loop {
        let (status, page) = get(
            http,
            format!("{url}/v0/executions?limit=200&cursor={cursor}"),
        )
        .await;
        assert_eq!(status, 200, "list executions: {page}");
        for summary in page["executions"].as_array().cloned().unwrap_or_default() {
            found.insert(
                summary["id"].as_str().unwrap().to_owned(),
                summary["status"].as_str().unwrap().to_owned(),
            );
        }
        cursor = page["next_cursor"].as_str().unwrap_or_default().to_owned();
        if cursor.is_empty() {
            return found;
        }
    }
}

/// Checks every acknowledged operation against the restarted kernel, and the contiguity of
/// every execution's event log; returns how many checks passed (one per acknowledged
/// operation and one per event log).
async fn verify(http: &reqwest::Client, url: &str, ledger: &SharedLedger) -> usize {
    let (created, intents, results, completed) = {
        let ledger = ledger.lock().unwrap();
        (
            ledger.created.clone(),
            ledger.intents.clone(),
            ledger.results.clone(),
            ledger.completed.clone(),
        )
    };
    let violations = ledger.lock().unwrap().violations.clone();
    assert!(violations.is_empty(), "unexpected answers: {violations:?}");
    let known = all_executions(http, url).await;
    let mut logs: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for id in known.keys() {
        let log = events(http, url, id).await;
        let sequences: Vec<i64> = log
            .iter()
            .map(|event| event["sequence"].as_i64().unwrap())
            .collect();
        let expected: Vec<i64> = (1..=i64::try_from(log.len()).unwrap()).collect();
        assert_eq!(
            sequences, expected,
            "event sequences of {id} are not contiguous from 1"
        );
        logs.insert(id.clone(), log);
    }
    for id in &created {
        assert!(
            known.contains_key(id),
            "acknowledged execution {id} is missing after the crash"
        );
    }
    let has = |execution: &str, kind: &str, step: Option<&str>| {
        logs.get(execution).is_some_and(|log| {
            log.iter().any(|event| {
                event["type"] == kind && step.is_none_or(|step| event["step_id"] == step)
            })
        })
    };
    for (execution, step) in &intents {
        assert!(
            has(execution, "step.created", Some(step)),
            "acknowledged intent lost: {execution} step {step}"
        );
    }
    for (execution, step) in &results {
        assert!(
            has(execution, "step.completed", Some(step)),
            "acknowledged step result lost: {execution} step {step}"
        );
    }
    for execution in &completed {
        assert!(
            has(execution, "execution.completed", None),
            "acknowledged completion lost: {execution}"
        );
    }
    logs.len() + created.len() + intents.len() + results.len() + completed.len()
}

/// Polls `/v0/ready` until it answers 200 (fails after 15 s).
async fn wait_ready(http: &reqwest::Client, url: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let ready = http.get(format!("{url}/v0/ready")).send().await;
        if ready.is_ok_and(|response| response.status().is_success()) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "restarted kernel not ready within 15 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Returns the `executions=N` of the kernel's `startup recovery done` log line, if logged.
fn recovered_executions(kernel: &Kernel) -> Option<String> {
    let log = kernel.log.lock().unwrap();
    let line = log
        .iter()
        .find(|line| line.contains("startup recovery done"))?;
    let value = line.split("executions=").nth(1)?;
    Some(value.split_whitespace().next()?.to_owned())
}

/// Runs creators and an agent against `url` for `LOAD`, then stops them.
async fn drive_load(
    http: &reqwest::Client,
    url: &str,
    cycle: usize,
    ledger: &SharedLedger,
) -> (CancellationToken, JoinSet<()>) {
    let stop = CancellationToken::new();
    let mut tasks = JoinSet::new();
    for _ in 0..2 {
        tasks.spawn(creator(
            http.clone(),
            url.to_owned(),
            ledger.clone(),
            stop.clone(),
        ));
    }
    tasks.spawn(agent(
        http.clone(),
        url.to_owned(),
        format!("crash-consumer-{cycle}"),
        ledger.clone(),
        stop.clone(),
    ));
    (stop, tasks)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_work_survives_kill_9_and_resumes_after_restart() {
    tokio::time::timeout(TEST_BUDGET, crash_cycles())
        .await
        .expect("crash test exceeded its time budget");
}

async fn crash_cycles() {
    let data_dir = tempfile::tempdir().unwrap();
    let store = backend::TestStore::fresh().await;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let ledger: SharedLedger = Arc::default();
    let mut report = Report::default();

    let mut kernel = Kernel::start(data_dir.path(), &store.url).await;
    for cycle in 0..CYCLES {
        let (stop, mut tasks) = drive_load(&http, &kernel.url, cycle, &ledger).await;
        tokio::time::sleep(LOAD).await;
        kernel.kill().await;
        stop.cancel();
        while tasks.join_next().await.is_some() {}

        let spawned = std::time::Instant::now();
        kernel = Kernel::start(data_dir.path(), &store.url).await;
        wait_ready(&http, &kernel.url).await;
        let ready_after = spawned.elapsed();
        let checked = verify(&http, &kernel.url, &ledger).await;
        eprintln!(
            "crash test: kill -9 #{} after {LOAD:?} of load; restarted kernel ready in {} ms \
             (startup recovery rebuilt {} executions); {checked} checks passed (every \
             acknowledged operation so far, every event log)",
            cycle + 1,
            ready_after.as_millis(),
            recovered_executions(&kernel).unwrap_or_else(|| "?".to_owned()),
        );
        report.ready_ms.push(ready_after.as_millis());
        report.checked += checked;
    }
    {
        let ledger = ledger.lock().unwrap();
        eprintln!(
            "acknowledged over {CYCLES} crashes: {} creates, {} intents, {} step results, {} completions",
            ledger.created.len(),
            ledger.intents.len(),
            ledger.results.len(),
            ledger.completed.len()
        );
        assert!(
            ledger.created.len() >= 10,
            "too little load: {} executions",
            ledger.created.len()
        );
        assert!(
            !ledger.results.is_empty(),
            "no step result was acknowledged"
        );
    }

    // A fresh agent finishes everything left pending or interrupted.
    let stop = CancellationToken::new();
    let finisher = tokio::spawn(agent(
        http.clone(),
        kernel.url.clone(),
        "crash-finisher".to_owned(),
        ledger.clone(),
        stop.clone(),
    ));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(25);
    loop {
        let statuses = all_executions(&http, &kernel.url).await;
        let open: Vec<_> = statuses
            .iter()
            .filter(|(_, status)| !matches!(status.as_str(), "completed" | "failed" | "cancelled"))
            .collect();
        if open.is_empty() {
            let created = ledger.lock().unwrap().created.clone();
            for id in &created {
                assert_eq!(
                    statuses.get(id).map(String::as_str),
                    Some("completed"),
                    "execution {id} did not complete"
                );
            }
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} executions still open after recovery: {open:?}",
            open.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stop.cancel();
    let _ = finisher.await;
    report.checked += verify(&http, &kernel.url, &ledger).await;
    let acknowledged = {
        let ledger = ledger.lock().unwrap();
        ledger.created.len() + ledger.intents.len() + ledger.results.len() + ledger.completed.len()
    };
    eprintln!(
        "crash test summary: {CYCLES} kill -9; {acknowledged} distinct acknowledged operations, \
         {} checks over {} verifications; ready after each restart in {:?} ms",
        report.checked,
        CYCLES + 1,
        report.ready_ms
    );
    kernel.terminate().await;
}

/// What the test measured, printed at the end.
#[derive(Default)]
struct Report {
    /// Time from spawning each restarted kernel to `/v0/ready` answering 200.
    ready_ms: Vec<u128>,
    /// Checks passed over every verification.
    checked: usize,
}

#[path = "crash/webhooks.rs"]
mod webhooks;
