//! Webhook deliveries across `kill -9` (docs/events.md): a receiver that is down while the
//! kernel is killed gets, once it is back and the kernel restarted, every matching event in
//! position order, none twice, and nothing acknowledged before the crash again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::{Value, json};

use super::{Kernel, backend, wait_ready};

#[derive(Clone, Default)]
struct Receiver {
    up: Arc<AtomicBool>,
    accepted: Arc<Mutex<Vec<i64>>>,
}

async fn receive(State(receiver): State<Receiver>, body: Bytes) -> StatusCode {
    if !receiver.up.load(Ordering::SeqCst) {
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    let event: Value = serde_json::from_slice(&body).unwrap_or_default();
    receiver
        .accepted
        .lock()
        .unwrap()
        .push(event["position"].as_i64().unwrap_or(-1));
    StatusCode::OK
}

async fn created_positions(http: &reqwest::Client, url: &str) -> Vec<i64> {
    let body: Value = http
        .get(format!(
            "{url}/v0/events?types=execution.created&limit=1000"
        ))
        .send()
        .await
        .expect("feed")
        .json()
        .await
        .expect("json");
    body["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|event| event["position"].as_i64().expect("position"))
        .collect()
}

async fn create(http: &reqwest::Client, url: &str, n: usize) {
    for i in 0..n {
        let status = http
            .post(format!("{url}/v0/executions"))
            .json(&json!({"agent_id": "hooked", "input": i}))
            .send()
            .await
            .expect("create")
            .status();
        assert!(status.is_success());
    }
}

async fn wait_for(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !check() {
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn webhook_deliveries_survive_kill_9_with_the_receiver_down() {
    let receiver = Receiver::default();
    receiver.up.store(true, Ordering::SeqCst);
    let app = axum::Router::new()
        .route("/hook", axum::routing::post(receive))
        .with_state(receiver.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let hook = format!("http://{}/hook", listener.local_addr().expect("address"));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let data_dir = tempfile::tempdir().expect("tempdir");
    let file = data_dir.path().join("webhooks.yaml");
    std::fs::write(
        &file,
        format!(
            "subscriptions:\n  - id: crash\n    url: {hook}\n    secret: s\n    \
             types: [execution.created]\n    start: beginning\n    min_backoff: 20ms\n    \
             max_backoff: 100ms\n"
        ),
    )
    .expect("write");
    let store = backend::TestStore::fresh().await;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client");
    let flags = ["--webhooks", file.to_str().expect("utf-8 path")];

    let kernel = Kernel::start_with(data_dir.path(), &store.url, &flags).await;
    wait_ready(&http, &kernel.url).await;
    create(&http, &kernel.url, 10).await;
    let first = created_positions(&http, &kernel.url).await;
    wait_for("the first deliveries", || {
        receiver.accepted.lock().unwrap().len() >= first.len()
    })
    .await;
    // Past the position save interval, so the acknowledged position is stored.
    tokio::time::sleep(Duration::from_millis(500)).await;
    receiver.up.store(false, Ordering::SeqCst);
    create(&http, &kernel.url, 10).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    kernel.kill().await;

    receiver.up.store(true, Ordering::SeqCst);
    let kernel = Kernel::start_with(data_dir.path(), &store.url, &flags).await;
    wait_ready(&http, &kernel.url).await;
    let expected = created_positions(&http, &kernel.url).await;
    assert_eq!(expected.len(), 20);
    wait_for("every event delivered after the restart", || {
        receiver.accepted.lock().unwrap().len() >= expected.len()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        *receiver.accepted.lock().unwrap(),
        expected,
        "each event once, in position order"
    );
    kernel.terminate().await;
}
