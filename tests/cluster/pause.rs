//! Issue check 3, a paused owner: SIGSTOP a kernel past its lease, let another take its
//! partitions over, SIGCONT it. No event under the old epoch commits after the takeover; the
//! resumed kernel logs the loss, answers what reached it by forwarding or 503, and rejoins.

use std::time::Duration;

use super::harness::{Database, poll};
use super::{BUDGET, owned_evenly_by, post, three_settled};

/// Events written under `epoch` for executions of `partition`.
async fn events_under(database: &Database, partition: i32, epoch: i64) -> i64 {
    sqlx::query_scalar::<_, i64>(
        "SELECT count(*) FROM events AS v JOIN executions AS e ON e.id = v.execution_id \
         WHERE e.partition = $1 AND v.epoch = $2",
    )
    .bind(partition)
    .bind(epoch)
    .fetch_one(&database.pool)
    .await
    .expect("count events")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_paused_owner_cannot_write_after_the_takeover_and_rejoins() {
    let Some(database) = Database::fresh().await else {
        return;
    };
    tokio::time::timeout(BUDGET, async {
        let dir = tempfile::tempdir().expect("temp dir");
        let kernels = three_settled(&database, dir.path(), &["--cluster"]).await;
        let http = reqwest::Client::new();
        let paused = &kernels[1];
        let mut mine = Vec::new();
        for n in 0..4 {
            let (status, _, body) = post(
                &http,
                &format!("{}/v0/executions", paused.url),
                serde_json::json!({"agent_id": "paused-agent", "input": {"n": n}}),
            )
            .await;
            assert_eq!(status, 201, "{body}");
            mine.push(body["id"].as_str().expect("id").to_owned());
        }
        let (partition, old_epoch): (i32, i64) = sqlx::query_as(
            "SELECT p.id, p.epoch FROM executions AS e JOIN partitions AS p ON p.id = e.partition \
             WHERE e.id = $1",
        )
        .bind(&mine[0])
        .fetch_one(&database.pool)
        .await
        .expect("partition of the execution");
        assert!(events_under(&database, partition, old_epoch).await >= 1);

        paused.signal("STOP").await;
        // Requests reach the paused kernel and wait in its socket until it resumes.
        let mut waiting = Vec::new();
        for id in &mine[1..] {
            let http = http.clone();
            let url = format!("{}/v0/executions/{id}/cancel", paused.url);
            // A transport error is an answer too (the resumed kernel's connection timers may
            // have run out during the pause): the request was not acknowledged.
            waiting.push(tokio::spawn(async move {
                let sent = http.post(&url).json(&serde_json::json!({})).send().await;
                sent.map(|response| response.status().as_u16())
                    .unwrap_or(503)
            }));
        }
        // Another kernel takes the partition at a higher epoch.
        let taken = poll(Duration::from_secs(10), || async {
            let rows: Vec<(Option<String>, i64)> =
                sqlx::query_as("SELECT owner, epoch FROM partitions WHERE id = $1")
                    .bind(partition)
                    .fetch_all(&database.pool)
                    .await
                    .ok()?;
            rows.into_iter()
                .find(|(owner, epoch)| owner.as_deref() != Some("k2") && *epoch > old_epoch)
        })
        .await
        .expect("another kernel takes the paused kernel's partition");
        let cut = events_under(&database, partition, old_epoch).await;
        // The new owner acts on the execution while the old one is paused (a kernel whose
        // route is still the paused one answers 503 once the forward times out).
        let cancelled = http
            .post(format!(
                "{}/v0/executions/{}/cancel",
                kernels[0].url, mine[0]
            ))
            .json(&serde_json::json!({}))
            .send()
            .await
            .expect("the survivor answers");
        let status = cancelled.status().as_u16();
        assert!(status < 300 || status == 503, "{status}");

        paused.signal("CONT").await;
        for request in waiting {
            let status = tokio::time::timeout(Duration::from_secs(15), request)
                .await
                .expect("the resumed kernel answers")
                .expect("request task");
            // Forwarded to the new owner and done there, or refused: never written by k2.
            assert!(status < 300 || status == 503, "answer {status}");
        }
        // The resumed kernel gave its partitions up, and comes back.
        let rejoined = poll(Duration::from_secs(12), || {
            owned_evenly_by(&database, &["k1", "k2", "k3"])
        })
        .await;
        assert!(
            rejoined.is_some(),
            "k2 did not rejoin; log:\n{}",
            paused.log()
        );
        assert!(
            paused.log().contains("lost partitions"),
            "log:\n{}",
            paused.log()
        );
        assert_eq!(
            events_under(&database, partition, old_epoch).await,
            cut,
            "an event under epoch {old_epoch} committed after {taken:?} took partition {partition}"
        );
        // Sequences stayed contiguous for every execution.
        let gaps: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM (SELECT execution_id, max(sequence) AS last, count(*) AS n \
             FROM events GROUP BY execution_id) AS s WHERE s.last <> s.n",
        )
        .fetch_one(&database.pool)
        .await
        .expect("gaps");
        assert_eq!(gaps, 0);
        for kernel in kernels {
            kernel.terminate().await;
        }
    })
    .await
    .expect("test within its budget");
}
