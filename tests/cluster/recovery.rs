//! Partition-scoped recovery (docs/architecture.md, "Cluster"): a kernel loads the open
//! executions of each partition it acquires, so their deadlines and timers run there with no
//! client request, and a kernel that loses a partition stops its actors and ends its streams.

use std::time::{Duration, Instant};

use futures::StreamExt;

use super::harness::{Database, Kernel, poll};
use super::{BUDGET, post};

/// Status, partition owner, the epochs of the first and last event of execution `id` and the
/// last event's payload, read from the database only (a request to a kernel could wake the
/// execution itself).
async fn stored(database: &Database, id: &str) -> (String, String, i64, i64, String) {
    sqlx::query_as::<_, (String, String, i64, i64, String)>(
        "SELECT e.status, p.owner, \
         (SELECT epoch FROM events WHERE execution_id = e.id ORDER BY sequence LIMIT 1), \
         (SELECT epoch FROM events WHERE execution_id = e.id ORDER BY sequence DESC LIMIT 1), \
         (SELECT type || ' ' || payload::text FROM events WHERE execution_id = e.id \
          ORDER BY sequence DESC LIMIT 1) \
         FROM executions AS e JOIN partitions AS p ON p.id = e.partition WHERE e.id = $1",
    )
    .bind(id)
    .fetch_one(&database.pool)
    .await
    .expect("read the execution")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dead_owners_waiting_execution_meets_its_deadline_on_the_new_owner_without_a_request() {
    let Some(database) = Database::fresh().await else {
        return;
    };
    tokio::time::timeout(BUDGET, async {
        let dir = tempfile::tempdir().expect("temp dir");
        let flags = ["--cluster", "--execution-timeout", "4s"];
        let mut kernels = super::three_settled(&database, dir.path(), &flags).await;
        let http = reqwest::Client::new();
        // Pending executions no agent takes: each waits (passivated) for its deadline.
        let mut ids = Vec::new();
        for n in 0..3 {
            let (status, _, body) = post(
                &http,
                &format!("{}/v0/executions", kernels[1].url),
                serde_json::json!({"agent_id": "nobody-connects", "input": {"n": n}}),
            )
            .await;
            assert_eq!(status, 201, "{body}");
            ids.push(body["id"].as_str().expect("id").to_owned());
        }
        let victim = kernels.remove(1);
        victim.kill().await;
        let killed = Instant::now();
        // No request reaches any kernel from here on: only the database is read.
        for id in &ids {
            let done = poll(Duration::from_secs(20), || async {
                let row = stored(&database, id).await;
                (row.0 != "pending").then_some(row)
            })
            .await;
            let Some((status, owner, first_epoch, last_epoch, last)) = done else {
                panic!(
                    "execution {id} is still pending 20 s after its owner died; logs:\n{}",
                    kernels
                        .iter()
                        .map(Kernel::log)
                        .collect::<Vec<_>>()
                        .join("\n---\n")
                );
            };
            assert_eq!(status, "failed", "execution {id}: {last}");
            assert!(
                last.starts_with("execution.failed") && last.contains("maximum duration"),
                "execution {id} ended by its deadline: {last}"
            );
            assert_ne!(owner, "k2", "a survivor holds the partition");
            assert!(
                last_epoch > first_epoch,
                "the deadline was written by the new owner (epoch {last_epoch} > {first_epoch})"
            );
        }
        println!("deadlines enforced {:?} after kill -9", killed.elapsed());
        let loaded = kernels.iter().any(|kernel| {
            kernel
                .log()
                .contains("loaded the open executions of acquired partitions")
        });
        assert!(loaded, "a survivor logged the load");
        for kernel in kernels {
            kernel.terminate().await;
        }
    })
    .await
    .expect("test within its budget");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kernel_that_loses_a_partition_ends_its_execution_streams_and_stops_its_actors() {
    let Some(database) = Database::fresh().await else {
        return;
    };
    tokio::time::timeout(BUDGET, async {
        let dir = tempfile::tempdir().expect("temp dir");
        let kernels = super::three_settled(&database, dir.path(), &["--cluster"]).await;
        let http = reqwest::Client::new();
        let paused = &kernels[1];
        let (status, _, body) = post(
            &http,
            &format!("{}/v0/executions", paused.url),
            serde_json::json!({"agent_id": "streamed", "input": {}}),
        )
        .await;
        assert_eq!(status, 201, "{body}");
        let id = body["id"].as_str().expect("id").to_owned();
        // The stream is served by the owner itself.
        let response = http
            .get(format!("{}/v0/executions/{id}/stream", paused.url))
            .send()
            .await
            .expect("stream");
        assert_eq!(response.status().as_u16(), 200);
        let mut body = response.bytes_stream();
        // The stream has replayed the log and waits for commits.
        let mut replayed = String::new();
        while !replayed.contains("execution.created") {
            let chunk = tokio::time::timeout(Duration::from_secs(5), body.next())
                .await
                .expect("the stream replays the log")
                .expect("stream open")
                .expect("chunk");
            replayed.push_str(&String::from_utf8_lossy(&chunk));
        }

        paused.signal("STOP").await;
        let partition: i32 = sqlx::query_scalar("SELECT partition FROM executions WHERE id = $1")
            .bind(&id)
            .fetch_one(&database.pool)
            .await
            .expect("partition");
        poll(Duration::from_secs(12), || async {
            let owner: Option<String> =
                sqlx::query_scalar("SELECT owner FROM partitions WHERE id = $1")
                    .bind(partition)
                    .fetch_one(&database.pool)
                    .await
                    .ok()?;
            (owner.as_deref() != Some("k2")).then_some(())
        })
        .await
        .expect("another kernel takes the partition while k2 is paused");
        paused.signal("CONT").await;
        let resumed = Instant::now();
        // The stream ends (the connection is closed cleanly, without a terminal event).
        let mut ended = false;
        let mut text = String::new();
        while let Ok(next) = tokio::time::timeout(Duration::from_secs(10), body.next()).await {
            match next {
                Some(Ok(chunk)) => text.push_str(&String::from_utf8_lossy(&chunk)),
                Some(Err(_)) | None => {
                    ended = true;
                    break;
                }
            }
        }
        assert!(
            ended,
            "the stream did not end within 10 s of the resume:\n{text}"
        );
        assert!(!text.contains("execution.timed_out") && !text.contains("execution.cancelled"));
        println!("stream ended {:?} after the resume", resumed.elapsed());
        // The log lines reach the test through a pipe: give them a moment.
        let wanted = [
            "lost partitions",
            "execution stream ended: its partition moved to another kernel",
            "stopped the resident executions of lost partitions",
        ];
        poll(Duration::from_secs(3), || async {
            let log = paused.log();
            wanted.iter().all(|line| log.contains(line)).then_some(())
        })
        .await;
        let log = paused.log();
        assert!(log.contains("lost partitions"), "log:\n{log}");
        assert!(
            log.contains("execution stream ended: its partition moved to another kernel"),
            "log:\n{log}"
        );
        assert!(
            log.contains("stopped the resident executions of lost partitions"),
            "log:\n{log}"
        );
        for kernel in kernels {
            kernel.terminate().await;
        }
    })
    .await
    .expect("test within its budget");
}
