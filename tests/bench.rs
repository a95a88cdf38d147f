//! `keel bench` end to end on the real binary: each scenario runs with a tiny N against a
//! `keel dev` kernel started for the test (127.0.0.1, a free port, a fresh SQLite file) and
//! its `--output json` report is checked against what the kernel itself says afterwards
//! (executions listed by status), not only against the bench's own counters.

use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::process::{Child, Command};

/// The binary under test.
const KEEL: &str = env!("CARGO_BIN_EXE_keel");
/// Bound of one bench command.
const BENCH_BUDGET: Duration = Duration::from_secs(90);

/// A `keel dev` kernel for one test.
struct Kernel {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Kernel {
    /// Starts `keel dev` (optionally with a policy) and waits until it is ready.
    async fn start(policy: Option<&str>) -> Kernel {
        let dir = tempfile::tempdir().expect("temporary directory");
        let port = std::net::TcpListener::bind(("127.0.0.1", 0))
            .and_then(|listener| listener.local_addr())
            .expect("free port")
            .port();
        let mut command = Command::new(KEEL);
        command
            .args(["dev", "--bind", "127.0.0.1", "--port", &port.to_string()])
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(["--log-level", "warn"]);
        if let Some(policy) = policy {
            let path = dir.path().join("policy.yaml");
            std::fs::write(&path, policy).expect("policy file");
            command.arg("--policy").arg(&path);
        }
        let child = command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("keel dev starts");
        let kernel = Kernel {
            child,
            url: format!("http://127.0.0.1:{port}"),
            _dir: dir,
        };
        let client = reqwest::Client::new();
        for _ in 0..400 {
            let ready = client.get(format!("{}/v0/ready", kernel.url)).send().await;
            if ready.is_ok_and(|response| response.status().is_success()) {
                return kernel;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("keel dev was not ready within 20 s");
    }

    fn pid(&self) -> String {
        self.child.id().expect("kernel running").to_string()
    }

    /// Counts the bench's executions (label bench=true) in `status`.
    async fn count(&self, status: &str) -> usize {
        let page: Value = reqwest::Client::new()
            .get(format!("{}/v0/executions", self.url))
            .query(&[
                ("status", status),
                ("label", "bench:true"),
                ("limit", "200"),
            ])
            .send()
            .await
            .expect("list executions")
            .json()
            .await
            .expect("list is JSON");
        page["executions"].as_array().map_or(0, Vec::len)
    }
}

/// Runs `keel bench ARGS --output json`; returns the exit success and the report.
async fn bench(args: &[&str]) -> (bool, Value) {
    let output = Command::new(KEEL)
        .arg("bench")
        .args(args)
        .args(["--output", "json"])
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(BENCH_BUDGET, output)
        .await
        .expect("keel bench finished in time")
        .expect("keel bench ran");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    let report: Value = serde_json::from_str(line).unwrap_or_else(|error| {
        panic!(
            "report is one JSON line ({error}): {stdout}\nstderr: {}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (output.status.success(), report)
}

/// Asserts the keys every scenario's report carries.
fn assert_common(report: &Value, scenario: &str) {
    assert_eq!(report["scenario"], scenario, "{report}");
    for key in [
        "url",
        "embedded",
        "elapsed_s",
        "throughput_per_s",
        "latency",
        "kernel",
        "bench",
        "errors",
        "first_error",
    ] {
        assert!(report.get(key).is_some(), "{key} missing in {report}");
    }
    assert_eq!(report["errors"], 0, "{report}");
    assert!(
        report["kernel"]["rss_kib"]
            .as_u64()
            .is_some_and(|rss| rss > 0),
        "{report}"
    );
    assert!(report["kernel"]["cpu_ms"].as_u64().is_some(), "{report}");
    assert!(report["bench"]["cpu_ms"].as_u64().is_some(), "{report}");
}

#[tokio::test]
async fn run_with_local_steps_plays_each_execution_to_completion() {
    let kernel = Kernel::start(None).await;
    let pid = kernel.pid();
    let (ok, report) = bench(&[
        "run",
        "--url",
        &kernel.url,
        "--pid",
        &pid,
        "--local-steps",
        "2",
        "--executions",
        "5",
        "--concurrency",
        "2",
    ])
    .await;
    assert!(ok, "{report}");
    assert_common(&report, "run");
    assert_eq!(report["mode"], "local");
    assert_eq!(report["executions"]["completed"], 5);
    // 2 invoke_tool + 1 complete per execution, 2 step results.
    assert_eq!(report["latency"]["intent"]["count"], 15);
    assert_eq!(report["latency"]["step_result"]["count"], 10);
    assert_eq!(report["latency"]["execution"]["count"], 5);
    assert_eq!(kernel.count("completed").await, 5);
}

#[tokio::test]
async fn run_without_a_scenario_keeps_the_mixed_loop() {
    let kernel = Kernel::start(None).await;
    let pid = kernel.pid();
    let (ok, report) = bench(&[
        "--url",
        &kernel.url,
        "--pid",
        &pid,
        "--executions",
        "6",
        "--concurrency",
        "2",
        "--tools-per-execution",
        "2",
        "--agents",
        "1",
        "--runners",
        "1",
    ])
    .await;
    assert!(ok, "{report}");
    assert_common(&report, "run");
    assert_eq!(report["mode"], "mixed");
    assert_eq!(report["executions"]["completed"], 6);
    assert_eq!(report["remote_jobs"], 6);
    assert_eq!(kernel.count("completed").await, 6);
}

#[tokio::test]
async fn denied_intents_are_reported_as_errors_and_fail_the_run() {
    let deny_all =
        "rules: []\ndefault:\n  decision: deny\n  reason: benchmarks are not allowed here\n";
    let kernel = Kernel::start(Some(deny_all)).await;
    let pid = kernel.pid();
    let (ok, report) = bench(&[
        "run",
        "--url",
        &kernel.url,
        "--pid",
        &pid,
        "--local-steps",
        "1",
        "--executions",
        "2",
        "--concurrency",
        "1",
    ])
    .await;
    assert!(!ok, "{report}");
    assert_eq!(report["executions"]["completed"], 0);
    assert!(report["errors"].as_u64().is_some_and(|errors| errors >= 1));
    let first = report["first_error"].as_str().unwrap_or_default();
    assert!(
        first.contains("benchmarks are not allowed here"),
        "{report}"
    );
}

#[tokio::test]
async fn blocked_parks_every_execution_then_resumes_them_all() {
    let kernel = Kernel::start(None).await;
    let pid = kernel.pid();
    let (ok, report) = bench(&[
        "blocked",
        "--url",
        &kernel.url,
        "--pid",
        &pid,
        "--executions",
        "20",
        "--agents",
        "3",
        "--concurrency",
        "4",
        "--settle",
        "50ms",
    ])
    .await;
    assert!(ok, "{report}");
    assert_common(&report, "blocked");
    assert_eq!(report["executions"]["created"], 20);
    assert_eq!(report["executions"]["blocked"], 20);
    assert_eq!(report["executions"]["completed"], 20);
    assert_eq!(report["latency"]["wait"]["count"], 20);
    assert_eq!(report["latency"]["signal"]["count"], 20);
    let memory = &report["memory"];
    for key in [
        "baseline_rss_kib",
        "blocked_rss_kib",
        "completed_rss_kib",
        "rss_per_blocked_bytes",
    ] {
        assert!(!memory[key].is_null(), "{key} missing in {report}");
    }
    assert_eq!(kernel.count("completed").await, 20);
    assert_eq!(kernel.count("blocked").await, 0);
}

#[tokio::test]
async fn create_leaves_pending_executions_and_counts_them() {
    let kernel = Kernel::start(None).await;
    let pid = kernel.pid();
    let (ok, report) = bench(&[
        "create",
        "--url",
        &kernel.url,
        "--pid",
        &pid,
        "--executions",
        "50",
        "--concurrency",
        "4",
        "--duration",
        "60s",
    ])
    .await;
    assert!(ok, "{report}");
    assert_common(&report, "create");
    assert_eq!(report["executions"]["created"], 50);
    assert_eq!(report["latency"]["create"]["count"], 50);
    assert_eq!(kernel.count("pending").await, 50);
}

#[tokio::test]
async fn restart_kills_its_kernel_and_the_old_executions_go_on() {
    let (ok, report) = bench(&[
        "restart",
        "--kernel-bin",
        KEEL,
        "--executions",
        "10",
        "--agents",
        "2",
        "--verify-sample",
        "3",
        "--timeout",
        "80s",
    ])
    .await;
    assert!(ok, "{report}");
    assert_common(&report, "restart");
    assert_eq!(report["executions"]["blocked"], 5);
    assert_eq!(report["executions"]["pending"], 5);
    assert!(
        report["ready_ms"].as_f64().is_some_and(|ms| ms > 0.0),
        "{report}"
    );
    let first = report["first_execution_ms"].as_f64().unwrap_or_default();
    let ready = report["ready_ms"].as_f64().unwrap_or_default();
    assert!(first >= ready, "{report}");
    assert_eq!(report["verify"]["signalled"], 3);
    assert_eq!(report["verify"]["blocked_resumed"], 3);
    assert_eq!(report["verify"]["pending_completed"], 5);
    // The bench stopped the kernel it started.
    let url = report["url"].as_str().unwrap_or_default();
    assert!(url.starts_with("http://127.0.0.1:"), "{report}");
    let gone = reqwest::Client::new()
        .get(format!("{url}/v0/health"))
        .timeout(Duration::from_secs(2))
        .send()
        .await;
    assert!(
        gone.is_err(),
        "the restart scenario left its kernel running"
    );
}

#[tokio::test]
async fn floor_times_round_trips_and_syncs_and_derives_the_least_an_execution_takes() {
    let kernel = Kernel::start(None).await;
    let pid = kernel.pid();
    let probe = tempfile::tempdir().expect("probe directory");
    let sync_dir = probe.path().to_string_lossy().into_owned();
    let (ok, report) = bench(&[
        "floor",
        "--url",
        &kernel.url,
        "--pid",
        &pid,
        "--duration",
        "1s",
        "--concurrency",
        "4",
        "--local-steps",
        "3",
        "--sync-dir",
        &sync_dir,
        "--syncs",
        "20",
    ])
    .await;
    assert!(ok, "{report}");
    assert_common(&report, "floor");
    let latency = &report["latency"];
    let single = latency["round_trip"]["count"].as_u64().unwrap_or(0);
    let loaded = latency["round_trip_loaded"]["count"].as_u64().unwrap_or(0);
    assert!(single > 0 && loaded > 0, "{report}");
    assert_eq!(report["requests"].as_u64(), Some(loaded), "{report}");
    assert_eq!(latency["sync"]["count"], 20, "{report}");
    let floor = &report["floor"];
    assert_eq!(floor["requests_per_execution"], 8, "{report}");
    assert_eq!(floor["durable_commits_per_execution"], 9, "{report}");
    let number = |value: &Value| value.as_f64().unwrap_or(f64::NAN);
    let expected =
        8.0 * number(&latency["round_trip"]["p50_ms"]) + 9.0 * number(&latency["sync"]["p50_ms"]);
    assert!(
        (number(&floor["execution_ms"]) - expected).abs() < 0.01,
        "{report}"
    );
    // With --pid the kernel's CPU per request is known.
    assert!(floor["kernel_cpu_us_per_request"].is_f64(), "{report}");
    // The probe file is gone and the kernel was only asked for its health.
    let left = std::fs::read_dir(probe.path()).map(Iterator::count).ok();
    assert_eq!(left, Some(0));
    for status in ["pending", "running", "completed"] {
        assert_eq!(kernel.count(status).await, 0, "{status}");
    }
}

#[tokio::test]
async fn floor_refuses_a_missing_sync_directory_before_measuring() {
    let kernel = Kernel::start(None).await;
    let missing = ["--sync-dir", "/nonexistent/keel-floor", "--output", "json"];
    let mut run = Command::new(KEEL);
    run.args(["bench", "floor", "--url", &kernel.url])
        .args(missing);
    let output = run.output().await.expect("keel bench ran");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--sync-dir"), "{stderr}");
}
