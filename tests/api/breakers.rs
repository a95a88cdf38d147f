//! Circuit breakers over HTTP (docs/guardrails.md): failures open a tool's breaker (event,
//! metric, `GET /v0/breakers`), intents for it are denied at once, after the cool-down one probe
//! passes and its success closes the breaker; an open breaker (of a tool, or of a runner) is
//! rebuilt from the log after a restart.

use std::time::Duration;

use keel_actors::kernel::KernelConfig;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::harness::{Assignment, Options, TestKernel, running_execution};

fn install(config: &mut KernelConfig, head: &str) {
    crate::harness::install_allow_all_policy(config, head);
}

fn short_cool_down(config: &mut KernelConfig) {
    install(
        config,
        "circuit_breakers:\n  - tool_id: 'flaky.*'\n    failures: 2\n    window: 1m\n    cool_down: 2s\n",
    );
}

fn long_cool_down(config: &mut KernelConfig) {
    install(
        config,
        "circuit_breakers:\n  - tool_ids: ['flaky.*']\n    failures: 2\n    cool_down: 1h\n",
    );
}

fn options(kernel: fn(&mut KernelConfig)) -> Options {
    Options {
        kernel,
        ..Options::default()
    }
}

async fn invoke(kernel: &TestKernel, assignment: &Assignment, tool: &str) -> Value {
    let (status, body) = assignment
        .intent(kernel, json!({"type": "invoke_tool", "tool_id": tool}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

/// Runs `tool` once and reports `success`.
async fn call(kernel: &TestKernel, assignment: &Assignment, tool: &str, success: bool) {
    let reply = invoke(kernel, assignment, tool).await;
    let step = reply["step_id"].as_str().expect("accepted").to_owned();
    let (status, body) = assignment
        .step_result(kernel, &step, success, json!({}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

async fn breakers(kernel: &TestKernel) -> Vec<Value> {
    let (status, body) = kernel.get("/v0/breakers").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["breakers"].as_array().expect("breakers array").clone()
}

async fn metric(kernel: &TestKernel, sample: &str) -> u64 {
    let text = kernel
        .client
        .get(kernel.url("/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics text");
    text.lines()
        .find_map(|line| line.strip_prefix(sample)?.strip_prefix(' '))
        .map_or(0, |value| value.trim().parse().expect("sample value"))
}

#[tokio::test]
async fn failures_open_the_breaker_a_probe_after_the_cool_down_closes_it() {
    let kernel = TestKernel::start_with(options(short_cool_down)).await;
    let (_agent, assignment) = running_execution(&kernel, "payer").await;
    call(&kernel, &assignment, "flaky.charge", false).await;
    assert_eq!(breakers(&kernel).await[0]["state"], "closed");
    call(&kernel, &assignment, "flaky.charge", false).await;
    let events = kernel.events(&assignment.execution_id).await;
    let opened = events.last().expect("an event");
    assert_eq!(opened["type"], "tool.circuit_opened", "{events:#?}");
    assert_eq!(opened["payload"]["tool_id"], "flaky.charge");
    assert_eq!(opened["payload"]["failures"], 2);
    let open = breakers(&kernel).await;
    assert_eq!(open.len(), 1, "{open:?}");
    assert_eq!(open[0]["tool_id"], "flaky.charge");
    assert_eq!(open[0]["state"], "open");
    assert_eq!(open[0]["until"], opened["payload"]["until"]);
    assert_eq!(
        metric(
            &kernel,
            "keel_circuit_transitions_total{tool_id=\"flaky.charge\",state=\"open\"}"
        )
        .await,
        1
    );
    assert_eq!(metric(&kernel, "keel_circuits_open").await, 1);

    let before = kernel.events(&assignment.execution_id).await.len();
    let denied = invoke(&kernel, &assignment, "flaky.charge").await;
    assert_eq!(denied["accepted"], false);
    let error = denied["error"].as_str().expect("error");
    assert!(
        error.starts_with(
            "circuit open for tool flaky.charge: 2 failures within 1m; next probe after "
        ),
        "{error}"
    );
    let events = kernel.events(&assignment.execution_id).await;
    assert_eq!(events.len(), before + 1, "only the denial is recorded");
    assert_eq!(events[before]["type"], "intent.denied");
    // Other tools, and other ids under the same glob, have breakers of their own.
    call(&kernel, &assignment, "flaky.refund", true).await;
    call(&kernel, &assignment, "steady", true).await;

    tokio::time::sleep(Duration::from_millis(2100)).await;
    let probe = invoke(&kernel, &assignment, "flaky.charge").await;
    assert_eq!(probe["accepted"], true, "{probe}");
    let held = invoke(&kernel, &assignment, "flaky.charge").await;
    assert_eq!(
        held["error"],
        "circuit half-open for tool flaky.charge: a probe call is running (rule: allow-all)"
    );
    assert_eq!(breakers(&kernel).await[0]["state"], "half_open");
    let step = probe["step_id"].as_str().expect("probe step");
    let (status, _) = assignment.step_result(&kernel, step, true, json!({})).await;
    assert_eq!(status, StatusCode::OK);
    let events = kernel.events(&assignment.execution_id).await;
    assert_eq!(events.last().expect("event")["type"], "tool.circuit_closed");
    assert_eq!(breakers(&kernel).await, Vec::<Value>::new());
    assert_eq!(metric(&kernel, "keel_circuits_open").await, 0);
    call(&kernel, &assignment, "flaky.charge", true).await;
    kernel.shutdown().await;
}

#[tokio::test]
async fn an_open_breaker_is_rebuilt_from_the_log_after_a_restart() {
    let kernel = TestKernel::start_with(options(long_cool_down)).await;
    let (agent, assignment) = running_execution(&kernel, "payer").await;
    call(&kernel, &assignment, "flaky.charge", false).await;
    call(&kernel, &assignment, "flaky.charge", false).await;
    let before = breakers(&kernel).await;
    assert_eq!(before[0]["state"], "open");
    drop(agent);
    let kernel = kernel.restart(options(long_cool_down)).await;
    let after = breakers(&kernel).await;
    assert_eq!(after.len(), 1, "{after:?}");
    assert_eq!(after[0]["state"], "open");
    assert_eq!(after[0]["until"], before[0]["until"]);
    kernel.shutdown().await;
}

fn runner_breaker(config: &mut KernelConfig) {
    install(
        config,
        "circuit_breakers:\n  - runner_id: 'flaky*'\n    failures: 2\n    cool_down: 1h\n",
    );
}

#[tokio::test]
async fn a_runner_whose_jobs_keep_failing_gets_no_job_while_its_breaker_is_open() {
    use crate::harness::TestRunner;
    let kernel = TestKernel::start_with(options(runner_breaker)).await;
    let mut flaky = TestRunner::connect(&kernel, "flaky-r", &["index"]).await;
    let (_agent, assignment) = running_execution(&kernel, "indexer").await;
    fail_remote_jobs(&kernel, &assignment, &mut flaky, "flaky-r", 2).await;
    let remote = json!({"type": "invoke_tool", "tool_id": "index", "remote": true});
    let listed = breakers(&kernel).await;
    let entry = listed
        .iter()
        .find(|entry| entry["runner_id"] == "flaky-r")
        .unwrap_or_else(|| panic!("runner breaker listed: {listed:?}"));
    assert_eq!(entry["state"], "open", "{entry}");
    assert_eq!(entry["failures"], 2);
    assert!(entry.get("tool_id").is_none(), "{entry}");
    assert_eq!(
        metric(
            &kernel,
            "keel_runner_circuit_transitions_total{runner_id=\"flaky-r\",state=\"open\"}"
        )
        .await,
        1
    );
    assert_eq!(metric(&kernel, "keel_runner_circuits_open").await, 1);
    // The next job waits for a runner whose breaker is closed, though `flaky-r` is idle.
    let (_, body) = assignment.intent(&kernel, remote.clone()).await;
    let step = body["step_id"].as_str().expect("accepted").to_owned();
    let quiet = tokio::time::timeout(Duration::from_millis(300), flaky.job()).await;
    assert!(quiet.is_err(), "no job for an open runner: {quiet:?}");
    let mut steady = TestRunner::connect(&kernel, "steady-r", &["index"]).await;
    let job = steady.job().await;
    assert_eq!(job["step_id"], json!(step));
    kernel.shutdown().await;
}

#[tokio::test]
async fn an_open_runner_breaker_is_rebuilt_from_the_log_after_a_restart() {
    use crate::harness::TestRunner;
    let kernel = TestKernel::start_with(options(runner_breaker)).await;
    let mut flaky = TestRunner::connect(&kernel, "flaky-r", &["index"]).await;
    let (agent, assignment) = running_execution(&kernel, "indexer").await;
    fail_remote_jobs(&kernel, &assignment, &mut flaky, "flaky-r", 2).await;
    let remote = json!({"type": "invoke_tool", "tool_id": "index", "remote": true});
    let runner_entry = |listed: Vec<Value>| {
        listed
            .into_iter()
            .find(|entry| entry["runner_id"] == "flaky-r")
            .unwrap_or_else(|| panic!("runner breaker of flaky-r listed"))
    };
    let before = runner_entry(breakers(&kernel).await);
    assert_eq!(before["state"], "open", "{before}");
    drop((agent, flaky));

    let kernel = kernel.restart(options(runner_breaker)).await;
    let after = runner_entry(breakers(&kernel).await);
    assert_eq!(after["state"], "open", "{after}");
    // The log has the time each result was recorded; the live breaker counted it a moment
    // later, when the dispatcher heard of it: the rebuilt cool-down ends at most that much sooner.
    let time = |value: &Value| {
        let text = value.as_str().expect("a time");
        chrono::DateTime::parse_from_rfc3339(text).expect("rfc 3339")
    };
    let sooner = time(&before["until"]) - time(&after["until"]);
    assert!(
        sooner >= chrono::Duration::zero() && sooner < chrono::Duration::seconds(1),
        "{before} / {after}"
    );
    assert_eq!(metric(&kernel, "keel_runner_circuits_open").await, 1);
    // It still steers jobs: the reconnected runner gets none while another runner does.
    let mut flaky = TestRunner::connect(&kernel, "flaky-r", &["index"]).await;
    let (_agent, assignment) = running_execution(&kernel, "indexer").await;
    let (_, body) = assignment.intent(&kernel, remote).await;
    let step = body["step_id"].as_str().expect("accepted").to_owned();
    let quiet = tokio::time::timeout(Duration::from_millis(300), flaky.job()).await;
    assert!(quiet.is_err(), "no job for an open runner: {quiet:?}");
    let mut steady = TestRunner::connect(&kernel, "steady-r", &["index"]).await;
    assert_eq!(steady.job().await["step_id"], json!(step));
    kernel.shutdown().await;
}

/// Has `runner` take and fail `count` remote `index` jobs of the execution, acknowledging each
/// first as the SDK's runner (and `keel runner`) does, which records the runner in the log
/// (`step.started`).
async fn fail_remote_jobs(
    kernel: &TestKernel,
    assignment: &crate::harness::Assignment,
    runner: &mut crate::harness::TestRunner,
    runner_id: &str,
    count: usize,
) {
    let remote = json!({"type": "invoke_tool", "tool_id": "index", "remote": true});
    for _ in 0..count {
        let (status, body) = assignment.intent(kernel, remote.clone()).await;
        assert_eq!(
            (status, &body["accepted"]),
            (StatusCode::OK, &json!(true)),
            "{body}"
        );
        let job = runner.job().await;
        let step = job["step_id"].as_str().expect("step id");
        let started = json!({"execution_id": job["execution_id"], "runner_id": runner_id});
        let path = format!("/v0/runners/steps/{step}/started");
        let (status, body) = kernel.post(&path, &started).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let (status, body) = runner.result(kernel, &job, false, json!(null)).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
}
