//! Issue check 4, the database cut-off: one kernel reaches PostgreSQL through a TCP proxy the
//! test owns. Cut (every connection reset, new ones refused), that kernel stops acting on its
//! partitions before their leases end (it fences itself: the database cannot tell it), the
//! others take them at a higher epoch, and after the cut heals it rejoins; no event was written
//! under an old epoch after the takeover. Clients keep sending requests to random kernels
//! throughout (check 5).

#[path = "../api/outage/proxy.rs"]
mod proxy;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::harness::{Database, Kernel, poll};
use super::load::{Load, Targets};
use super::{BUDGET, owned_evenly_by, post};

/// `(partition, epoch)` of the partitions `node` holds, per the database.
async fn held_by(database: &Database, node: &str) -> BTreeMap<i32, i64> {
    sqlx::query_as::<_, (i32, i64)>("SELECT id, epoch FROM partitions WHERE owner = $1")
        .bind(node)
        .fetch_all(&database.pool)
        .await
        .expect("read partitions")
        .into_iter()
        .collect()
}

/// Events written under `epoch` for executions of `partition`, for each of `partitions`.
async fn events_under(database: &Database, partitions: &BTreeMap<i32, i64>) -> BTreeMap<i32, i64> {
    let mut counts = BTreeMap::new();
    for (partition, epoch) in partitions {
        let count: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM events AS v JOIN executions AS e ON e.id = v.execution_id \
             WHERE e.partition = $1 AND v.epoch = $2",
        )
        .bind(partition)
        .bind(epoch)
        .fetch_one(&database.pool)
        .await
        .expect("count events");
        counts.insert(*partition, count);
    }
    counts
}

/// A metric sample of `kernel`'s `/metrics`.
async fn metric(http: &reqwest::Client, kernel: &Kernel, name: &str) -> Option<u64> {
    let text = http
        .get(format!("{}/metrics", kernel.url))
        .timeout(Duration::from_secs(8))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{name} ")))
        .and_then(|value| value.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kernel_cut_from_the_database_stops_before_its_leases_end_and_rejoins_after() {
    let Some(database) = Database::fresh().await else {
        return;
    };
    tokio::time::timeout(BUDGET, async {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut proxy = proxy::Proxy::start(database.server_address());
        let via_proxy = database.url_via(proxy.address.port());
        let k1 = Kernel::start("k1", &database.url, &dir.path().join("k1")).await;
        let k2 = Kernel::start("k2", &via_proxy, &dir.path().join("k2")).await;
        let k3 = Kernel::start("k3", &database.url, &dir.path().join("k3")).await;
        let kernels = [&k1, &k2, &k3];
        super::settled(&database, &kernels).await;
        let http = reqwest::Client::new();
        // Executions in k2's partitions, written under its epochs.
        let mut mine = Vec::new();
        for n in 0..3 {
            let (status, _, body) = post(
                &http,
                &format!("{}/v0/executions", k2.url),
                serde_json::json!({"agent_id": "cut-agent", "input": {"n": n}}),
            )
            .await;
            assert_eq!(status, 201, "{body}");
            mine.push(body["id"].as_str().expect("id").to_owned());
        }
        let targets: Targets = std::sync::Arc::new(std::sync::Mutex::new(
            kernels.iter().map(|kernel| kernel.url.clone()).collect(),
        ));
        let load = Load::start(targets, 4);
        tokio::time::sleep(Duration::from_secs(1)).await;

        let before = held_by(&database, "k2").await;
        assert!(before.len() >= 18, "k2 holds its share: {before:?}");
        proxy.close().await;
        let cut = Instant::now();

        // k2 fences itself: it logs it while every one of its leases still runs in the
        // database (nothing else could stop it: the database cannot reach it).
        let fenced = poll(Duration::from_secs(8), || async {
            k2.log()
                .contains("lost partitions: their leases were not renewed in time")
                .then_some(())
        })
        .await;
        let fenced_after = cut.elapsed();
        let still_leased: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM partitions WHERE owner = 'k2' AND lease_expires_at > now()",
        )
        .fetch_one(&database.pool)
        .await
        .expect("read leases");
        assert!(fenced.is_some(), "k2 did not fence itself; log:\n{}", k2.log());
        assert_eq!(
            still_leased,
            before.len() as i64,
            "k2 stopped acting only after some of its leases ended"
        );
        println!("k2 fenced itself {fenced_after:?} after the cut, all {still_leased} leases running");
        assert_eq!(
            metric(&http, &k2, "keel_cluster_partitions_owned").await,
            Some(0),
            "k2 holds nothing while cut"
        );
        // Its executions: k2 acts on none of them (503, retry later).
        let (status, retry, body) = post(
            &http,
            &format!("{}/v0/executions/{}/cancel", k2.url, mine[0]),
            serde_json::json!({}),
        )
        .await;
        assert_eq!((status, retry.as_deref()), (503, Some("1")), "{body}");

        // The others take k2's partitions at higher epochs.
        let taken = poll(Duration::from_secs(10), || async {
            let now = database.live_owners().await;
            let all = before.iter().all(|(id, epoch)| {
                now.iter()
                    .any(|(now_id, owner, now_epoch)| now_id == id && owner != "k2" && now_epoch > epoch)
            });
            all.then_some(())
        })
        .await;
        assert!(taken.is_some(), "k1 and k3 did not take k2's partitions: {:?}", database.partitions().await);
        let taken_after = cut.elapsed();
        let cut_counts = events_under(&database, &before).await;
        println!("k1 and k3 held k2's partitions {taken_after:?} after the cut");
        // The new owner acts on k2's execution.
        let cancelled = poll(Duration::from_secs(5), || async {
            let (status, _, body) = post(
                &http,
                &format!("{}/v0/executions/{}/cancel", k1.url, mine[1]),
                serde_json::json!({}),
            )
            .await;
            (status < 300).then_some(body)
        })
        .await;
        assert!(cancelled.is_some(), "a survivor cancels k2's execution");

        proxy.reopen();
        let healed = Instant::now();
        let rejoined = poll(Duration::from_secs(15), || {
            owned_evenly_by(&database, &["k1", "k2", "k3"])
        })
        .await;
        assert!(rejoined.is_some(), "k2 did not rejoin; log:\n{}", k2.log());
        println!("k2 rejoined {:?} after the cut healed", healed.elapsed());
        // It acts again (right after an acquisition a request may still get 503 with
        // Retry-After, as while any partition moves).
        let acted = poll(Duration::from_secs(5), || async {
            let (status, retry, body) = post(
                &http,
                &format!("{}/v0/executions/{}/cancel", k2.url, mine[2]),
                serde_json::json!({}),
            )
            .await;
            assert!(
                status < 300 || (status == 503 && retry.as_deref() == Some("1")),
                "{status} {body}"
            );
            (status < 300).then_some(())
        })
        .await;
        assert!(acted.is_some(), "k2 does not act after rejoining; log:\n{}", k2.log());
        tokio::time::sleep(Duration::from_secs(1)).await;
        let tally = load.finish().await;

        assert_eq!(
            events_under(&database, &before).await,
            cut_counts,
            "an event was written under an epoch of k2 after the takeover"
        );
        // Within every execution, epochs never go back and sequences have no gap.
        let backwards: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM events AS a JOIN events AS b \
             ON b.execution_id = a.execution_id AND b.sequence = a.sequence + 1 \
             WHERE b.epoch < a.epoch",
        )
        .fetch_one(&database.pool)
        .await
        .expect("epochs");
        assert_eq!(backwards, 0, "an older epoch wrote after a newer one");
        let gaps: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM (SELECT execution_id, max(sequence) AS last, count(*) AS n \
             FROM events GROUP BY execution_id) AS s WHERE s.last <> s.n",
        )
        .fetch_one(&database.pool)
        .await
        .expect("gaps");
        assert_eq!(gaps, 0);

        println!(
            "load: {} operations ok, {} failed, {} answers 2xx, {} answers 503, {} refused, errors {:?}",
            tally.operations_ok(),
            tally.failed_operations,
            tally.ok_answers,
            tally.unavailable_answers,
            tally.refused,
            tally.errors
        );
        assert!(tally.errors.is_empty(), "client errors: {:?}", tally.errors);
        assert!(tally.operations_ok() >= 50, "too little load got through");
        assert!(tally.ok_share() >= 0.95, "{:.3} of operations 2xx", tally.ok_share());
        tally.verify(&database).await;
        for kernel in [k1, k2, k3] {
            kernel.terminate().await;
        }
    })
    .await
    .expect("test within its budget");
}
