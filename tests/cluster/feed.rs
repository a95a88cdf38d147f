//! The kernel-wide feed and webhooks over three kernels (issue 32, check 8): while the kernels
//! write, one kernel's commit stays open for two seconds after its events took their positions
//! (a trigger the test installs sleeps inside that commit). A feed reader on another kernel and
//! a webhook receiver must never pass the held events: at the end each has every event of the
//! table exactly once. With positions taken from a sequence before commit, the reader passes
//! the held events while they are invisible and never sees them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use futures::StreamExt;
use serde_json::{Value, json};

use crate::BUDGET;
use crate::harness::{Database, Kernel, poll};

/// `(execution_id, sequence)` of an event.
type Key = (String, i64);

/// What a webhook receiver or a feed reader got: event id to key, and how often each id came.
#[derive(Clone, Default)]
struct Got(Arc<Mutex<BTreeMap<String, (Key, usize)>>>);

impl Got {
    fn add(&self, event: &Value) {
        let (Some(id), Some(execution), Some(sequence)) = (
            event["id"].as_str(),
            event["execution_id"].as_str(),
            event["sequence"].as_i64(),
        ) else {
            panic!("not a feed event: {event}");
        };
        let mut got = self.0.lock().expect("lock");
        let entry = got
            .entry(id.to_owned())
            .or_insert(((execution.to_owned(), sequence), 0));
        entry.1 += 1;
    }

    fn keys(&self) -> BTreeSet<Key> {
        self.0
            .lock()
            .expect("lock")
            .values()
            .map(|(key, _)| key.clone())
            .collect()
    }

    fn repeated(&self) -> Vec<Key> {
        self.0
            .lock()
            .expect("lock")
            .values()
            .filter(|(_, count)| *count > 1)
            .map(|(key, _)| key.clone())
            .collect()
    }
}

async fn receive(State(got): State<Got>, body: Bytes) -> StatusCode {
    match serde_json::from_slice::<Value>(&body) {
        Ok(event) => {
            got.add(&event);
            StatusCode::NO_CONTENT
        }
        Err(_) => StatusCode::BAD_REQUEST,
    }
}

/// Serves a webhook endpoint on loopback; returns what it got and its URL.
async fn receiver() -> (Got, String) {
    let got = Got::default();
    let app = axum::Router::new()
        .route("/hook", axum::routing::post(receive))
        .with_state(got.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (got, format!("http://{address}/hook"))
}

/// Reads `/v0/events/stream` of `url` from the start into `got`, until the task is dropped.
async fn read_stream(url: String, got: Got) {
    let http = reqwest::Client::new();
    let response = http
        .get(format!("{url}/v0/events/stream"))
        .send()
        .await
        .expect("open the feed stream");
    assert_eq!(response.status(), 200);
    let mut body = response.bytes_stream();
    let mut buffer = String::new();
    while let Some(chunk) = body.next().await {
        let Ok(chunk) = chunk else { return };
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buffer.find("\n\n") {
            let frame: String = buffer.drain(..end + 2).collect();
            for line in frame.lines() {
                if let Some(data) = line.strip_prefix("data:") {
                    let event: Value = serde_json::from_str(data.trim()).expect("event JSON");
                    got.add(&event);
                }
            }
        }
    }
}

/// Every event of the table.
async fn stored(database: &Database) -> BTreeSet<Key> {
    sqlx::query_as::<_, (String, i64)>("SELECT execution_id, sequence FROM events")
        .fetch_all(&database.pool)
        .await
        .expect("read events")
        .into_iter()
        .collect()
}

/// A webhook receiver, and three settled kernels that all have a subscription of every event
/// from the beginning to it (the elected kernel delivers).
async fn hooked_cluster(database: &Database, dir: &std::path::Path) -> (Got, Vec<Kernel>) {
    let (hooked, hook_url) = receiver().await;
    let subscriptions = dir.join("webhooks.yaml");
    std::fs::write(
        &subscriptions,
        format!(
            "subscriptions:\n  - id: all\n    url: {hook_url}\n    secret: s3cret-s3cret\n    \
             start: beginning\n    timeout: 5s\n    min_backoff: 10ms\n    max_backoff: 100ms\n"
        ),
    )
    .expect("write subscriptions");
    let hooks = subscriptions.to_str().expect("utf-8 path");
    let flags = ["--cluster", "--webhooks", hooks];
    let kernels = crate::three_settled(database, dir, &flags).await;
    (hooked, kernels)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_feed_reader_and_a_webhook_get_every_event_once_across_a_held_commit() {
    let Some(database) = Database::fresh().await else {
        return;
    };
    tokio::time::timeout(BUDGET, async {
        let dir = tempfile::tempdir().expect("temp dir");
        // Every kernel has the subscription; the elected one delivers.
        let (hooked, kernels) = hooked_cluster(&database, dir.path()).await;
        // A commit that writes a creation marked `hold-me` sleeps 2 s after its events are in.
        sqlx::raw_sql(
            "CREATE FUNCTION hold_two_seconds() RETURNS trigger LANGUAGE plpgsql AS \
             $$ BEGIN PERFORM pg_sleep(2); RETURN NULL; END $$; \
             CREATE TRIGGER hold_marked AFTER INSERT ON events FOR EACH ROW \
             WHEN (NEW.type = 'execution.created' AND NEW.payload::text LIKE '%hold-me%') \
             EXECUTE FUNCTION hold_two_seconds();",
        )
        .execute(&database.pool)
        .await
        .expect("install the trigger");

        let read = Got::default();
        let reader = tokio::spawn(read_stream(kernels[0].url.clone(), read.clone()));
        let urls: Vec<String> = kernels.iter().map(|k| k.url.clone()).collect();
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(20))
            .build()
            .expect("client");
        let mut writers = Vec::new();
        for writer in 0..3_usize {
            let (http, urls) = (http.clone(), urls.clone());
            writers.push(tokio::spawn(async move {
                let mut written = 0;
                for n in 0..40_usize {
                    let url = &urls[(writer + n) % urls.len()];
                    // Each writer's 10th creation is held: three held commits, on different
                    // kernels, while the others keep writing.
                    let input = if n == 10 {
                        json!({"mark": "hold-me", "writer": writer})
                    } else {
                        json!({"writer": writer, "n": n})
                    };
                    let answer = http
                        .post(format!("{url}/v0/executions"))
                        .header("Idempotency-Key", format!("w{writer}-{n}"))
                        .json(&json!({"agent_id": "feed-agent", "input": input}))
                        .send()
                        .await;
                    if let Ok(response) = answer
                        && response.status().is_success()
                    {
                        written += 1;
                    }
                }
                written
            }));
        }
        let mut written = 0;
        for writer in writers {
            written += writer.await.expect("writer");
        }
        // Almost every creation was answered (a run where all failed must not pass).
        assert!(
            written >= 114,
            "only {written} of 120 creations answered 2xx"
        );
        let table = stored(&database).await;
        assert!(
            table.len() >= written,
            "{} events for {written} creations",
            table.len()
        );
        let held: i64 =
            sqlx::query_scalar("SELECT count(*) FROM events WHERE payload::text LIKE '%hold-me%'")
                .fetch_one(&database.pool)
                .await
                .expect("count held");
        assert_eq!(held, 3, "three held commits happened");

        let caught_up = poll(Duration::from_secs(15), || async {
            let table = stored(&database).await;
            (read.keys() == table && hooked.keys() == table).then_some(())
        })
        .await;
        let table = stored(&database).await;
        assert!(
            caught_up.is_some(),
            "feed reader missed {:?}, webhook missed {:?} (of {} events)",
            table.difference(&read.keys()).collect::<Vec<_>>(),
            table.difference(&hooked.keys()).collect::<Vec<_>>(),
            table.len()
        );
        assert_eq!(
            read.repeated(),
            Vec::<Key>::new(),
            "the reader got events twice"
        );
        assert_eq!(
            hooked.repeated(),
            Vec::<Key>::new(),
            "the webhook got events twice"
        );
        reader.abort();
        for kernel in kernels {
            kernel.terminate().await;
        }
    })
    .await
    .expect("test within its budget");
}

/// Creates `count` executions through the kernels at `urls` in turn; returns how many were
/// answered 2xx.
async fn create(urls: &[String], prefix: &str, count: usize) -> usize {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .expect("client");
    let mut written = 0;
    for n in 0..count {
        let url = &urls[n % urls.len()];
        let answer = http
            .post(format!("{url}/v0/executions"))
            .header("Idempotency-Key", format!("{prefix}-{n}"))
            .json(&json!({"agent_id": "hook-agent", "input": {"n": n}}))
            .send()
            .await;
        if let Ok(response) = answer
            && response.status().is_success()
        {
            written += 1;
        }
    }
    written
}

/// The kernel holding partition 0 (elected for singleton work), per the database.
async fn elected(database: &Database) -> Option<String> {
    sqlx::query_scalar::<_, Option<String>>(
        "SELECT owner FROM partitions WHERE id = 0 AND lease_expires_at > now()",
    )
    .fetch_optional(&database.pool)
    .await
    .ok()
    .flatten()
    .flatten()
}

#[tokio::test(flavor = "multi_thread")]
async fn webhooks_are_delivered_once_by_the_elected_kernel_and_move_when_it_dies() {
    let Some(database) = Database::fresh().await else {
        return;
    };
    tokio::time::timeout(BUDGET, async {
        let dir = tempfile::tempdir().expect("temp dir");
        // Every kernel has the same subscription.
        let (hooked, mut kernels) = hooked_cluster(&database, dir.path()).await;
        let urls: Vec<String> = kernels.iter().map(|k| k.url.clone()).collect();
        let written = create(&urls, "before", 30).await;
        assert_eq!(written, 30, "every creation answered 2xx");
        let delivered = poll(Duration::from_secs(15), || async {
            let table = stored(&database).await;
            (table.len() >= 30 && hooked.keys() == table).then_some(())
        })
        .await;
        assert!(delivered.is_some(), "not every event was delivered");
        // Let the acknowledged position be stored (at most every 200 ms).
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert_eq!(
            hooked.repeated(),
            Vec::<Key>::new(),
            "delivered by several kernels"
        );

        let leader = elected(&database).await.expect("partition 0 has an owner");
        let index = kernels
            .iter()
            .position(|k| k.node_id == leader)
            .expect("the leader is one of ours");
        let victim = kernels.remove(index);
        victim.kill().await;
        let urls: Vec<String> = kernels.iter().map(|k| k.url.clone()).collect();
        // Creations keep being answered by the survivors (retrying the 503s of the takeover).
        let mut written = 0;
        for round in 0..20 {
            written += create(&urls, &format!("after-{round}"), 1).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            written >= 19,
            "only {written} of 20 creations after the kill answered"
        );
        let delivered = poll(Duration::from_secs(20), || async {
            let table = stored(&database).await;
            (hooked.keys() == table).then_some(())
        })
        .await;
        let table = stored(&database).await;
        assert!(
            delivered.is_some(),
            "after the leader's kill -9, undelivered: {:?}",
            table.difference(&hooked.keys()).collect::<Vec<_>>()
        );
        let successor = elected(&database)
            .await
            .expect("partition 0 has a new owner");
        assert_ne!(successor, leader);
        let successor_log = kernels
            .iter()
            .find(|k| k.node_id == successor)
            .expect("the successor is one of ours")
            .log();
        assert!(
            successor_log.contains("webhook delivery runs on this kernel now"),
            "{successor_log}"
        );
        // Nothing acknowledged before the kill was sent again (its position was stored).
        assert_eq!(hooked.repeated(), Vec::<Key>::new(), "deliveries repeated");
        for kernel in kernels {
            kernel.terminate().await;
        }
    })
    .await
    .expect("test within its budget");
}
