//! Cluster mode on real processes: several `keel serve --cluster` kernels on one fresh
//! PostgreSQL database (docs/architecture.md, "Cluster"). Needs `KEEL_TEST_POSTGRES_URL`;
//! without it every test passes after printing that it skipped.

mod bench;
mod cutoff;
mod directory;
mod feed;
mod gauges;
mod harness;
mod load;
mod matching;
mod notice;
mod pause;
mod recovery;
mod rolling;
mod stale;
mod start;
mod tool_changes;
mod view;
mod wakeups;

use std::time::{Duration, Instant};

use harness::{Database, Kernel, poll};
use start::{P, owned_evenly_by, settled, three_kernels, three_settled};

/// Bound of each test.
const BUDGET: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread")]
async fn three_kernels_own_every_partition_once_and_evenly() {
    let Some(database) = Database::fresh().await else {
        return;
    };
    tokio::time::timeout(BUDGET, async {
        let dir = tempfile::tempdir().expect("temp dir");
        let kernels = three_kernels(&database, dir.path()).await;
        let started = Instant::now();
        let counts = poll(Duration::from_secs(10), || {
            owned_evenly_by(&database, &["k1", "k2", "k3"])
        })
        .await;
        let Some(counts) = counts else {
            panic!(
                "after 10 s the partitions are {:?}; logs:\n{}",
                database.partitions().await,
                kernels
                    .iter()
                    .map(Kernel::log)
                    .collect::<Vec<_>>()
                    .join("\n---\n")
            );
        };
        println!("balanced in {:?}: {counts:?}", started.elapsed());
        // While all are up, no partition is ever without a live owner and nothing moves.
        let settled = database.live_owners().await;
        for _ in 0..20 {
            tokio::time::sleep(Duration::from_millis(150)).await;
            assert_eq!(
                database.live_owners().await,
                settled,
                "ownership moved while all were up"
            );
        }
        for kernel in kernels {
            kernel.terminate().await;
        }
    })
    .await
    .expect("test within its budget");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_kernels_partitions_get_new_owners_at_a_higher_epoch_within_7_s() {
    let Some(database) = Database::fresh().await else {
        return;
    };
    tokio::time::timeout(BUDGET, async {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut kernels = three_settled(&database, dir.path(), &["--cluster"]).await;
        let before = database.live_owners().await;
        let victim = kernels.remove(1);
        assert_eq!(victim.node_id, "k2");
        let orphaned: Vec<(i32, i64)> = before
            .iter()
            .filter(|(_, owner, _)| owner == "k2")
            .map(|(id, _, epoch)| (*id, *epoch))
            .collect();
        victim.kill().await;
        let killed = Instant::now();
        let moved = poll(Duration::from_secs(7), || async {
            let now = database.live_owners().await;
            let all_moved = orphaned.iter().all(|(id, epoch)| {
                now.iter().any(|(now_id, owner, now_epoch)| {
                    now_id == id && owner != "k2" && now_epoch > epoch
                })
            });
            (all_moved && now.len() == P).then_some(now)
        })
        .await;
        let elapsed = killed.elapsed();
        let Some(now) = moved else {
            panic!(
                "7 s after kill -9 the partitions are {:?}; logs:\n{}",
                database.partitions().await,
                kernels
                    .iter()
                    .map(Kernel::log)
                    .collect::<Vec<_>>()
                    .join("\n---\n")
            );
        };
        println!("{} partitions moved in {elapsed:?}", orphaned.len());
        // Partitions of the survivors kept their owners and epochs.
        for (id, owner, epoch) in &before {
            if owner != "k2" {
                assert!(
                    now.contains(&(*id, owner.clone(), *epoch)),
                    "partition {id} moved"
                );
            }
        }
        let survivors = owned_evenly_by(&database, &["k1", "k3"]).await;
        assert!(survivors.is_some(), "survivors are uneven: {now:?}");
        for kernel in kernels {
            kernel.terminate().await;
        }
    })
    .await
    .expect("test within its budget");
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_hands_the_partitions_over_at_once() {
    let Some(database) = Database::fresh().await else {
        return;
    };
    tokio::time::timeout(BUDGET, async {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut kernels = three_settled(&database, dir.path(), &["--cluster"]).await;
        let leaving = kernels.remove(2);
        let log = leaving.terminate().await;
        assert!(log.contains("left the cluster"), "log:\n{log}");
        let stopped = Instant::now();
        // Well within a lease (5 s): the leaver released its leases and marked itself gone.
        let counts = poll(Duration::from_secs(3), || {
            owned_evenly_by(&database, &["k1", "k2"])
        })
        .await;
        assert!(
            counts.is_some(),
            "3 s after SIGTERM: {:?}",
            database.partitions().await
        );
        println!("handed over {:?} after the exit", stopped.elapsed());
        for kernel in kernels {
            kernel.terminate().await;
        }
    })
    .await
    .expect("test within its budget");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kernel_in_the_other_mode_is_refused_with_what_to_do() {
    let Some(database) = Database::fresh().await else {
        return;
    };
    tokio::time::timeout(BUDGET, async {
        let dir = tempfile::tempdir().expect("temp dir");
        // A one-kernel kernel holds the database: a cluster kernel is refused.
        let single = Kernel::start_with("single", &database.url, &dir.path().join("s"), &[])
            .await
            .expect("the one-kernel kernel starts");
        let refused =
            Kernel::start_with("k1", &database.url, &dir.path().join("k1"), &["--cluster"])
                .await
                .err()
                .expect("a cluster kernel is refused while a one-kernel kernel runs");
        assert!(
            refused.contains("started without --cluster"),
            "log:\n{refused}"
        );
        single.terminate().await;

        // The first cluster kernel marks the database; a one-kernel kernel is then refused,
        // even once every cluster kernel stopped.
        let member = Kernel::start("k1", &database.url, &dir.path().join("k1")).await;
        let refused = Kernel::start_with("single", &database.url, &dir.path().join("s"), &[])
            .await
            .err()
            .expect("a one-kernel kernel is refused on a cluster database");
        assert!(
            refused.contains("--cluster --node-id NAME"),
            "log:\n{refused}"
        );
        // Another partition count is refused, naming the right one.
        let refused = Kernel::start_with(
            "k2",
            &database.url,
            &dir.path().join("k2"),
            &["--cluster", "--partitions", "32"],
        )
        .await
        .err()
        .expect("another partition count is refused");
        assert!(
            refused.contains("start it with --partitions 64"),
            "log:\n{refused}"
        );
        member.terminate().await;
        let refused = Kernel::start_with("single", &database.url, &dir.path().join("s"), &[])
            .await
            .err()
            .expect("a one-kernel kernel is refused on a cluster database");
        assert!(
            refused.contains("used by a cluster of keel kernels"),
            "log:\n{refused}"
        );
    })
    .await
    .expect("test within its budget");
}

/// POSTs JSON to `url`; returns the status, the `Retry-After` header and the body.
async fn post(
    http: &reqwest::Client,
    url: &str,
    body: serde_json::Value,
) -> (u16, Option<String>, serde_json::Value) {
    let response = http.post(url).json(&body).send().await.expect("POST");
    let status = response.status().as_u16();
    let retry = response
        .headers()
        .get("retry-after")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    (status, retry, response.json().await.unwrap_or_default())
}

/// GETs `url`; returns the status, the `Retry-After` header and the body.
async fn get(http: &reqwest::Client, url: &str) -> (u16, Option<String>, serde_json::Value) {
    let response = http.get(url).send().await.expect("GET");
    let status = response.status().as_u16();
    let retry = response
        .headers()
        .get("retry-after")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    (status, retry, response.json().await.unwrap_or_default())
}

/// GETs `url`, retrying a 503 (with `Retry-After`, as a client should) for up to 3 s: right
/// after partitions move, a kernel's routes are up to a tick old.
async fn get_retrying(
    http: &reqwest::Client,
    url: &str,
) -> (u16, Option<String>, serde_json::Value) {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let answer = get(http, url).await;
        if answer.0 != 503 || Instant::now() >= deadline {
            return answer;
        }
        assert_eq!(
            answer.1.as_deref(),
            Some("1"),
            "503 without Retry-After: {}",
            answer.2
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The kernel holding the partition of execution `id`, per the database.
async fn owner_of(database: &Database, id: &str) -> String {
    sqlx::query_scalar::<_, String>(
        "SELECT p.owner FROM executions AS e JOIN partitions AS p ON p.id = e.partition \
         WHERE e.id = $1",
    )
    .bind(id)
    .fetch_one(&database.pool)
    .await
    .expect("owner of the execution")
}

#[tokio::test(flavor = "multi_thread")]
async fn any_kernel_answers_for_any_execution_and_a_dead_owners_work_moves() {
    let Some(database) = Database::fresh().await else {
        return;
    };
    tokio::time::timeout(BUDGET, async {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut kernels = three_settled(&database, dir.path(), &["--cluster"]).await;
        let http = reqwest::Client::new();

        // Each kernel creates executions in partitions it holds.
        let mut created = Vec::new();
        for kernel in &kernels {
            for n in 0..3 {
                let (status, _, body) = post(
                    &http,
                    &format!("{}/v0/executions", kernel.url),
                    serde_json::json!({"agent_id": "far-agent", "input": {"n": n}}),
                )
                .await;
                assert_eq!(status, 201, "{body}");
                let id = body["id"].as_str().expect("id").to_owned();
                assert_eq!(
                    owner_of(&database, &id).await,
                    kernel.node_id,
                    "created in a partition of its own"
                );
                created.push((id, kernel.node_id.clone()));
            }
        }
        // Every kernel answers for every execution, the same way.
        for (id, _) in &created {
            let mut answers = Vec::new();
            for kernel in &kernels {
                let (status, _, body) =
                    get_retrying(&http, &format!("{}/v0/executions/{id}", kernel.url)).await;
                assert_eq!(status, 200, "{body}");
                answers.push(body);
            }
            assert!(
                answers.iter().all(|answer| answer == &answers[0]),
                "{answers:?}"
            );
        }
        // A signal through a kernel that does not own the execution reaches it.
        let (id, owner) = created
            .iter()
            .find(|(_, owner)| owner == "k2")
            .cloned()
            .expect("an execution of k2");
        let (status, _, body) = post(
            &http,
            &format!("{}/v0/executions/{id}/cancel", kernels[0].url),
            serde_json::json!({}),
        )
        .await;
        assert!(status < 300, "{status} {body}");
        let (_, _, body) =
            get_retrying(&http, &format!("{}/v0/executions/{id}", kernels[2].url)).await;
        assert_eq!(body["status"], "cancelled", "{body}");
        // The kernel that forwarded says so in /metrics, next to its partitions.
        let metrics = http
            .get(format!("{}/metrics", kernels[0].url))
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .expect("metrics text");
        let sample = |name: &str| -> u64 {
            metrics
                .lines()
                .find_map(|line| line.strip_prefix(&format!("{name} ")))
                .and_then(|value| value.trim().parse().ok())
                .unwrap_or_else(|| panic!("no {name} in:\n{metrics}"))
        };
        assert!(sample("keel_cluster_forwarded_requests_total") >= 1);
        assert!(sample("keel_cluster_partitions_owned") >= 20);
        assert!(sample("keel_cluster_partition_acquisitions_total") >= 20);
        assert!(metrics.trim_end().ends_with("# EOF"), "{metrics}");

        // The owner of another execution dies: answers are 503 with Retry-After until a
        // survivor takes the partition, then the survivor answers and acts on it.
        let (id, _) = created
            .iter()
            .find(|(other, owner)| owner == "k2" && *other != id)
            .cloned()
            .expect("another execution of k2");
        assert_eq!(owner, "k2");
        let victim = kernels.remove(1);
        victim.kill().await;
        let killed = Instant::now();
        let unavailable = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let answered = poll(Duration::from_secs(8), || {
            let http = http.clone();
            let url = format!("{}/v0/executions/{id}/cancel", kernels[0].url);
            let unavailable = unavailable.clone();
            async move {
                let (status, retry, body) = post(&http, &url, serde_json::json!({})).await;
                match status {
                    200..=299 => Some(body),
                    503 => {
                        assert_eq!(retry.as_deref(), Some("1"), "{body}");
                        unavailable.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        None
                    }
                    other => panic!("{other} {body}"),
                }
            }
        })
        .await;
        assert!(
            answered.is_some(),
            "no survivor took over the execution within 8 s"
        );
        println!(
            "cancelled through a survivor {:?} after kill -9 ({} answers were 503)",
            killed.elapsed(),
            unavailable.load(std::sync::atomic::Ordering::Relaxed)
        );
        let (_, _, body) =
            get_retrying(&http, &format!("{}/v0/executions/{id}", kernels[1].url)).await;
        assert_eq!(body["status"], "cancelled", "{body}");
        assert_ne!(owner_of(&database, &id).await, "k2");
        for kernel in kernels {
            kernel.terminate().await;
        }
    })
    .await
    .expect("test within its budget");
}
