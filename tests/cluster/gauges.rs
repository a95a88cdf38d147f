//! `keel_live_executions{status}` per kernel after partitions move: each kernel counts exactly
//! the open executions of the partitions it holds. Without giving back the executions of a
//! partition it released, the first kernel kept counting all of them once a second one joined
//! and took half (the sum over kernels then exceeded the executions).

use std::time::Duration;

use super::harness::{Database, Kernel, poll};
use super::{BUDGET, owned_evenly_by, post};

/// `keel_live_executions{status="pending"}` of `kernel`.
async fn pending_gauge(http: &reqwest::Client, kernel: &Kernel) -> i64 {
    let text = http
        .get(format!("{}/metrics", kernel.url))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics text");
    text.lines()
        .find_map(|line| line.strip_prefix("keel_live_executions{status=\"pending\"} "))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("no pending gauge in:\n{text}"))
}

/// Pending executions in the partitions `node` holds, per the database.
async fn pending_owned_by(database: &Database, node: &str) -> i64 {
    sqlx::query_scalar::<_, i64>(
        "SELECT count(*) FROM executions AS e JOIN partitions AS p ON p.id = e.partition \
         WHERE e.status = 'pending' AND p.owner = $1",
    )
    .bind(node)
    .fetch_one(&database.pool)
    .await
    .expect("count pending")
}

/// Waits until each kernel's gauge equals the pending executions it holds.
async fn gauges_match(http: &reqwest::Client, database: &Database, kernels: &[&Kernel]) -> bool {
    poll(Duration::from_secs(10), || async {
        for kernel in kernels {
            let owned = pending_owned_by(database, &kernel.node_id).await;
            if pending_gauge(http, kernel).await != owned {
                return None;
            }
        }
        Some(())
    })
    .await
    .is_some()
}

#[tokio::test(flavor = "multi_thread")]
async fn each_kernel_counts_exactly_the_executions_it_owns_as_partitions_move() {
    let Some(database) = Database::fresh().await else {
        return;
    };
    tokio::time::timeout(BUDGET, async {
        let dir = tempfile::tempdir().expect("temp dir");
        let k1 = Kernel::start("k1", &database.url, &dir.path().join("k1")).await;
        poll(Duration::from_secs(10), || {
            owned_evenly_by(&database, &["k1"])
        })
        .await
        .expect("k1 holds every partition within 10 s");
        let http = reqwest::Client::new();
        // 24 pending executions (no agent connected), all on k1.
        const N: i64 = 24;
        for n in 0..N {
            let (status, _, body) = post(
                &http,
                &format!("{}/v0/executions", k1.url),
                serde_json::json!({"agent_id": "gauge-agent", "input": {"n": n}}),
            )
            .await;
            assert_eq!(status, 201, "{body}");
        }
        assert_eq!(pending_gauge(&http, &k1).await, N);

        // k2 joins: k1 releases about half of the partitions, k2 acquires them.
        let k2 = Kernel::start("k2", &database.url, &dir.path().join("k2")).await;
        poll(Duration::from_secs(10), || {
            owned_evenly_by(&database, &["k1", "k2"])
        })
        .await
        .expect("two kernels balance within 10 s");
        assert!(
            gauges_match(&http, &database, &[&k1, &k2]).await,
            "gauges k1 {} k2 {}, owned k1 {} k2 {}",
            pending_gauge(&http, &k1).await,
            pending_gauge(&http, &k2).await,
            pending_owned_by(&database, "k1").await,
            pending_owned_by(&database, "k2").await,
        );
        let moved = pending_gauge(&http, &k2).await;
        assert!(moved > 0 && moved < N, "k2 took {moved} of {N}");

        // k2 leaves: k1 takes its partitions back and counts every execution once.
        k2.terminate().await;
        poll(Duration::from_secs(10), || {
            owned_evenly_by(&database, &["k1"])
        })
        .await
        .expect("k1 holds every partition again");
        assert!(
            gauges_match(&http, &database, &[&k1]).await,
            "k1 counts {} of {N}",
            pending_gauge(&http, &k1).await
        );
        assert_eq!(pending_gauge(&http, &k1).await, N);
        k1.terminate().await;
    })
    .await
    .expect("test within its budget");
}
