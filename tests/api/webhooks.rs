//! Webhook subscriptions (docs/events.md): signed, ordered, at-least-once deliveries with
//! retries, positions kept in the store across a restart, and a dead endpoint that holds at most
//! one page in memory. The receivers are loopback HTTP servers.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use keel::webhooks::{WebhookOptions, WebhookService, sign};
use serde_json::{Value, json};

use crate::harness::{Options, TestKernel, eventually};

const SECRET: &str = "hook-secret";

/// One request a receiver got.
#[derive(Clone, Debug)]
pub struct Received {
    pub headers: HeaderMap,
    pub body: Bytes,
    /// Whether the receiver acknowledged it (2xx).
    pub accepted: bool,
}

/// A loopback receiver that refuses the first `fail_first` requests with 500.
#[derive(Clone, Default)]
pub struct Receiver {
    pub requests: Arc<Mutex<Vec<Received>>>,
    fail_first: Arc<Mutex<usize>>,
}

impl Receiver {
    /// Serves on `127.0.0.1:0`; returns the receiver and its URL.
    pub async fn start(fail_first: usize) -> (Self, String) {
        let receiver = Self {
            requests: Arc::default(),
            fail_first: Arc::new(Mutex::new(fail_first)),
        };
        let app = axum::Router::new()
            .route("/hook", axum::routing::post(receive))
            .with_state(receiver.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("address");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        (receiver, format!("http://{address}/hook"))
    }

    /// Positions of the acknowledged deliveries, in the order they were acknowledged.
    pub fn accepted_positions(&self) -> Vec<i64> {
        self.requests
            .lock()
            .expect("lock")
            .iter()
            .filter(|request| request.accepted)
            .map(|request| position(&request.body))
            .collect()
    }
}

async fn receive(State(receiver): State<Receiver>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let accepted = {
        let mut failing = receiver.fail_first.lock().expect("lock");
        if *failing > 0 {
            *failing -= 1;
            false
        } else {
            true
        }
    };
    receiver.requests.lock().expect("lock").push(Received {
        headers,
        body,
        accepted,
    });
    if accepted {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    }
}

fn position(body: &[u8]) -> i64 {
    let event: Value = serde_json::from_slice(body).expect("JSON body");
    event["position"].as_i64().expect("position")
}

/// Writes a subscriptions file with one subscription.
pub fn write_subscription(path: &Path, id: &str, url: &str, types: &str) {
    let text = format!(
        "subscriptions:\n  - id: {id}\n    url: {url}\n    secret: {SECRET}\n    types: [{types}]\n    \
         start: beginning\n    timeout: 2s\n    min_backoff: 10ms\n    max_backoff: 40ms\n"
    );
    std::fs::write(path, text).expect("write subscriptions");
}

/// Positions of every event of the feed matching `query`.
async fn feed_positions(kernel: &TestKernel, query: &str) -> Vec<i64> {
    let (status, body) = kernel.get(&format!("/v0/events?limit=1000&{query}")).await;
    assert_eq!(status, reqwest::StatusCode::OK, "{body}");
    body["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|event| event["position"].as_i64().expect("position"))
        .collect()
}

fn options() -> WebhookOptions {
    WebhookOptions {
        poll: Duration::from_millis(50),
    }
}

#[tokio::test]
async fn deliveries_are_signed_ordered_and_retried_until_acknowledged() {
    let kernel = TestKernel::start().await;
    let (receiver, url) = Receiver::start(3).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("webhooks.yaml");
    write_subscription(&file, "chat", &url, "execution.created, signal.*");
    let service = WebhookService::start(kernel.kernel.clone(), file.clone(), options())
        .await
        .expect("webhooks load");
    for n in 0..4 {
        let id = kernel.create("agent", json!({ "n": n })).await["id"]
            .as_str()
            .expect("id")
            .to_owned();
        let (status, _) = kernel
            .post(
                &format!("/v0/executions/{id}/signal"),
                &json!({"signal_type": "go"}),
            )
            .await;
        assert_eq!(status, reqwest::StatusCode::OK);
    }
    let expected = feed_positions(&kernel, "types=execution.created,signal.*").await;
    assert_eq!(expected.len(), 8);
    eventually("every matching event is delivered", || async {
        (receiver.accepted_positions() == expected).then_some(())
    })
    .await;
    let requests = receiver.requests.lock().expect("lock").clone();
    // The first event was refused three times and retried; nothing overtook it.
    assert_eq!(requests.len(), expected.len() + 3);
    assert!(
        requests[..4]
            .iter()
            .all(|request| position(&request.body) == expected[0])
    );
    for request in &requests {
        let header = |name: &str| {
            request
                .headers
                .get(name)
                .and_then(|value| value.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        let timestamp: i64 = header("keel-timestamp").parse().expect("timestamp");
        assert!((chrono::Utc::now().timestamp() - timestamp).abs() < 60);
        assert!(sign::verify(
            SECRET.as_bytes(),
            timestamp,
            &request.body,
            &header("keel-signature")
        ));
        assert!(!sign::verify(
            b"wrong",
            timestamp,
            &request.body,
            &header("keel-signature")
        ));
        assert_eq!(header("keel-webhook-id"), "chat");
        assert_eq!(header("content-type"), "application/json");
        let event: Value = serde_json::from_slice(&request.body).expect("json");
        assert_eq!(header("keel-event-id"), event["id"].as_str().expect("id"));
        assert_eq!(header("keel-event-position"), event["position"].to_string());
        let kind = event["type"].as_str().expect("type");
        assert!(
            kind == "execution.created" || kind == "signal.received",
            "{kind}"
        );
    }
    let metrics = kernel.kernel.encode_metrics();
    assert!(
        metrics
            .contains("keel_webhook_deliveries_total{subscription=\"chat\",result=\"failed\"} 3"),
        "{metrics}"
    );
    assert!(
        metrics.contains("keel_webhook_deliveries_total{subscription=\"chat\",result=\"ok\"} 8")
    );
    service.stop().await;
    // The acknowledged position is stored: everything up to the last delivery.
    let stored = kernel.kernel.webhook_positions().await.expect("positions");
    assert_eq!(stored.len(), 1);
    assert!(stored[0].1 >= *expected.last().expect("last"));
    kernel.shutdown().await;
}

#[tokio::test]
async fn a_dead_endpoint_holds_one_page_and_nothing_is_lost_or_repeated_across_a_restart() {
    let kernel = TestKernel::start().await;
    // An address nobody listens on.
    let dead = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        format!("http://{}/hook", listener.local_addr().expect("address"))
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("webhooks.yaml");
    write_subscription(&file, "ops", &dead, "execution.created");
    let service = WebhookService::start(kernel.kernel.clone(), file.clone(), options())
        .await
        .expect("webhooks load");
    let creations = 520;
    let mut tasks = Vec::new();
    for chunk in 0..8 {
        let client = kernel.client.clone();
        let base = kernel.base_url.clone();
        tasks.push(tokio::spawn(async move {
            for n in 0..creations / 8 {
                let status = client
                    .post(format!("{base}/v0/executions"))
                    .json(&json!({"agent_id": "bulk", "input": [chunk, n]}))
                    .send()
                    .await
                    .expect("create")
                    .status();
                assert_eq!(status, reqwest::StatusCode::CREATED);
            }
        }));
    }
    for task in tasks {
        task.await.expect("creator");
    }
    eventually("the lag shows the backlog", || async {
        let metrics = kernel.kernel.encode_metrics();
        metrics
            .lines()
            .find_map(|line| line.strip_prefix("keel_webhook_lag_positions{subscription=\"ops\"} "))
            .and_then(|value| value.parse::<i64>().ok())
            .filter(|lag| *lag >= creations as i64)
            .map(|_| metrics)
    })
    .await;
    let metrics = kernel.kernel.encode_metrics();
    let buffered: i64 = metrics
        .lines()
        .find_map(|line| line.strip_prefix("keel_webhook_buffered_events{subscription=\"ops\"} "))
        .and_then(|value| value.parse().ok())
        .expect("buffered gauge");
    assert!(
        buffered <= 500,
        "a dead endpoint holds at most one page ({buffered})"
    );
    assert!(metrics.contains("keel_webhook_lag_seconds{subscription=\"ops\"}"));
    // The kernel is not slowed by it: a new creation answers at once.
    tokio::time::timeout(Duration::from_secs(2), kernel.create("bulk", json!("late")))
        .await
        .expect("creation is not held up by a dead endpoint");
    service.stop().await;

    // Restart the kernel; the endpoint comes back (the file now names it).
    let kernel = kernel.restart(Options::default()).await;
    let (receiver, url) = Receiver::start(0).await;
    write_subscription(&file, "ops", &url, "execution.created");
    let service = WebhookService::start(kernel.kernel.clone(), file.clone(), options())
        .await
        .expect("webhooks load");
    let expected = {
        let mut all = Vec::new();
        let mut after = 0;
        loop {
            let (_, body) = kernel
                .get(&format!(
                    "/v0/events?types=execution.created&limit=1000&after_position={after}"
                ))
                .await;
            let page = body["events"].as_array().expect("events").clone();
            all.extend(
                page.iter()
                    .map(|event| event["position"].as_i64().expect("position")),
            );
            after = body["next_after_position"].as_i64().expect("next");
            if body["has_more"] != json!(true) {
                break all;
            }
        }
    };
    assert_eq!(expected.len(), creations + 1);
    eventually("the backlog is delivered once, in order", || async {
        (receiver.accepted_positions().len() >= expected.len()).then_some(())
    })
    .await;
    assert_eq!(receiver.accepted_positions(), expected);
    service.stop().await;
    kernel.shutdown().await;
}

#[tokio::test]
async fn the_subscriptions_file_reloads_and_a_broken_one_keeps_the_old_set() {
    let kernel = TestKernel::start().await;
    let (first, first_url) = Receiver::start(0).await;
    let (second, second_url) = Receiver::start(0).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("webhooks.yaml");
    std::fs::write(&file, "subscriptions: [").expect("write");
    let refused = WebhookService::start(kernel.kernel.clone(), file.clone(), options()).await;
    assert!(refused.is_err(), "a broken file is refused at start");
    write_subscription(&file, "one", &first_url, "execution.created");
    let service = WebhookService::start(kernel.kernel.clone(), file.clone(), options())
        .await
        .expect("webhooks load");
    kernel.create("a", json!(1)).await;
    eventually("the first receiver gets it", || async {
        (first.accepted_positions().len() == 1).then_some(())
    })
    .await;
    // A broken edit keeps the subscription in force.
    std::fs::write(&file, "subscriptions:\n  - id: one\n    url: ftp://nope\n").expect("write");
    eventually("the broken reload is counted", || async {
        kernel
            .kernel
            .encode_metrics()
            .contains("keel_webhook_reloads_total{result=\"error\"} 1")
            .then_some(())
    })
    .await;
    kernel.create("a", json!(2)).await;
    eventually("the first receiver still gets events", || async {
        (first.accepted_positions().len() == 2).then_some(())
    })
    .await;
    // Pointing the subscription elsewhere keeps its position: only new events go there.
    write_subscription(&file, "one", &second_url, "execution.created");
    eventually("the reload is counted", || async {
        kernel
            .kernel
            .encode_metrics()
            .contains("keel_webhook_reloads_total{result=\"ok\"} 1")
            .then_some(())
    })
    .await;
    kernel.create("a", json!(3)).await;
    eventually("the second receiver gets the new event", || async {
        (second.accepted_positions().len() == 1).then_some(())
    })
    .await;
    assert_eq!(first.accepted_positions().len(), 2);
    service.stop().await;
    kernel.shutdown().await;
}
