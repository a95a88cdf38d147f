//! `keel bench run --local-steps` against several kernels (docs/benchmarks.md, "Several
//! kernels"): `--url A,B` spreads the agents and the creations over the kernels, `--pid P,Q`
//! sums their CPU and memory, and every execution still completes.

use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::process::Command;

use super::harness::{Database, Kernel, poll};
use super::{BUDGET, owned_evenly_by};

#[tokio::test(flavor = "multi_thread")]
async fn a_bench_over_two_kernels_creates_on_both_and_completes_every_execution() {
    let Some(database) = Database::fresh().await else {
        return;
    };
    tokio::time::timeout(BUDGET, async {
        let dir = tempfile::tempdir().expect("temp dir");
        // `keel serve` denies every tool without a policy; the bench's tool must be allowed.
        let policy = dir.path().join("policy.yaml");
        std::fs::write(&policy, "rules: []\ndefault:\n  decision: allow\n").expect("policy");
        let policy = policy.to_str().expect("UTF-8 path");
        let mut kernels = Vec::new();
        for node in ["k1", "k2"] {
            let data = dir.path().join(node);
            let flags = ["--cluster", "--policy", policy];
            let kernel = Kernel::start_with(node, &database.url, &data, &flags).await;
            kernels.push(kernel.unwrap_or_else(|log| panic!("{node}: {log}")));
        }
        let (k1, k2) = (&kernels[0], &kernels[1]);
        poll(Duration::from_secs(10), || {
            owned_evenly_by(&database, &["k1", "k2"])
        })
        .await
        .expect("two kernels balance within 10 s");
        // Each kernel routes by its own view (a tick old at most): wait until both show it.
        let http = reqwest::Client::new();
        poll(Duration::from_secs(10), || async {
            for kernel in &kernels {
                let url = format!("{}/v0/cluster", kernel.url);
                let view: Value = http.get(&url).send().await.ok()?.json().await.ok()?;
                let kernels = view["kernels"].as_array()?;
                let settled = view["unowned"] == 0
                    && kernels.len() == 2
                    && kernels
                        .iter()
                        .all(|k| k["partitions_owned"].as_u64() >= Some(32));
                if !settled {
                    return None;
                }
            }
            Some(())
        })
        .await
        .expect("both kernels see the balanced cluster within 10 s");
        let urls = format!("{},{}", k1.url, k2.url);
        let pids = format!("{},{}", k1.pid(), k2.pid());
        let output = Command::new(env!("CARGO_BIN_EXE_keel"))
            .args(["bench", "run", "--local-steps", "2", "--executions", "8"])
            .args(["--concurrency", "2", "--url", &urls, "--pid", &pids])
            .args(["--output", "json"])
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output()
            .await
            .expect("keel bench ran");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let report: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
            .unwrap_or_else(|error| {
                panic!(
                    "one JSON report ({error}): {stdout}\nstderr: {}",
                    String::from_utf8_lossy(&output.stderr)
                )
            });
        assert!(output.status.success(), "{report}");
        assert_eq!(report["kernels"], 2, "{report}");
        assert_eq!(report["url"], urls.as_str(), "{report}");
        assert_eq!(report["errors"], 0, "{report}");
        assert_eq!(report["executions"]["completed"], 8, "{report}");
        assert!(report["kernel"]["cpu_ms"].as_u64().is_some(), "{report}");
        assert!(report["kernel"]["rss_kib"].as_u64().is_some(), "{report}");

        // A kernel writes the executions it creates into its own partitions: both created.
        let owners: Vec<(String, i64, i64)> = sqlx::query_as(
            "SELECT p.owner, count(*), count(*) FILTER (WHERE e.status = 'completed') \
             FROM executions AS e JOIN partitions AS p ON p.id = e.partition \
             GROUP BY p.owner ORDER BY p.owner",
        )
        .fetch_all(&database.pool)
        .await
        .expect("executions by owner");
        assert_eq!(owners.len(), 2, "{owners:?}");
        for (owner, created, completed) in &owners {
            assert!(*created >= 1 && created == completed, "{owner}: {owners:?}");
        }
        assert_eq!(
            owners.iter().map(|(_, n, _)| n).sum::<i64>(),
            8,
            "{owners:?}"
        );
    })
    .await
    .expect("test within its budget");
}
