//! Memory amplification (issue 38, item 4): pages of large events stop at `--max-page-bytes`
//! and their next cursor continues where they stopped (every event once, in order), and a
//! stream whose client reads nothing is closed by the write-stall deadline, freeing what it
//! buffered.

use std::time::Duration;

use keel::http::feed::FeedSettings;
use keel::http::{ConnectionTimeouts, HttpSettings};
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use crate::harness::{Options, TestKernel, eventually};

const CAP: usize = 256 * 1024;
const BLOB: usize = 64 * 1024;

fn capped() -> Options {
    Options {
        settings: HttpSettings {
            max_page_bytes: CAP,
            ..Options::default().settings
        },
        ..Options::default()
    }
}

/// One page: its status, body length and JSON.
async fn page(kernel: &TestKernel, path: &str) -> (usize, Value) {
    let response = kernel
        .client
        .get(kernel.url(path))
        .send()
        .await
        .expect("answer");
    assert_eq!(response.status(), StatusCode::OK, "{path}");
    let bytes = response.bytes().await.expect("body");
    let value = serde_json::from_slice(&bytes).expect("JSON page");
    (bytes.len(), value)
}

#[tokio::test]
async fn feed_pages_stop_at_the_byte_cap_and_continue_from_their_cursor() {
    let kernel = TestKernel::start_with(capped()).await;
    let blob = "x".repeat(BLOB);
    let mut ids = Vec::new();
    for _ in 0..12 {
        let created = kernel.create("bulky", json!({ "blob": blob })).await;
        ids.push(created["id"].as_str().expect("id").to_owned());
    }
    let mut after = 0;
    let mut positions = Vec::new();
    let mut pages = 0;
    loop {
        let (length, body) = page(
            &kernel,
            &format!("/v0/events?limit=1000&after_position={after}"),
        )
        .await;
        let events = body["events"].as_array().cloned().unwrap_or_default();
        assert!(length <= CAP + 1024, "page of {length} bytes over the cap");
        pages += 1;
        positions.extend(events.iter().filter_map(|event| event["position"].as_i64()));
        after = body["next_after_position"].as_i64().expect("cursor");
        if body["has_more"] != json!(true) {
            break;
        }
        assert!(
            !events.is_empty(),
            "a page cut short holds at least one event"
        );
        assert!(pages < 50, "pages advance");
    }
    assert!(
        pages >= 3,
        "12 × 64 KiB take several 256 KiB pages: {pages}"
    );
    // Every event once, in order.
    let mut logged = 0;
    for id in &ids {
        logged += kernel.events(id).await.len();
    }
    assert!(logged >= 12);
    assert_eq!(positions.len(), logged, "{positions:?}");
    assert!(
        positions.windows(2).all(|pair| pair[0] < pair[1]),
        "{positions:?}"
    );
    kernel.shutdown().await;
}

#[tokio::test]
async fn execution_event_pages_stop_at_the_byte_cap_and_continue_from_latest_sequence() {
    let kernel = TestKernel::start_with(capped()).await;
    let created = kernel
        .create("bulky", json!({ "blob": "x".repeat(BLOB) }))
        .await;
    let id = created["id"].as_str().expect("id").to_owned();
    for n in 0..8 {
        let (status, body) = kernel
            .post(
                &format!("/v0/executions/{id}/signal"),
                &json!({"signal_type": format!("s{n}"), "payload": {"blob": "y".repeat(BLOB)}}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let mut after = 0;
    let mut sequences = Vec::new();
    let mut pages = 0;
    loop {
        let (length, body) = page(
            &kernel,
            &format!("/v0/executions/{id}/events?limit=1000&after_sequence={after}"),
        )
        .await;
        assert!(length <= CAP + 1024, "page of {length} bytes over the cap");
        let events = body["events"].as_array().cloned().unwrap_or_default();
        if events.is_empty() {
            assert_eq!(body["latest_sequence"], json!(0));
            break;
        }
        pages += 1;
        sequences.extend(events.iter().filter_map(|event| event["sequence"].as_i64()));
        after = body["latest_sequence"].as_i64().expect("latest_sequence");
        assert_eq!(Some(&after), sequences.last());
        assert!(pages < 50, "pages advance");
    }
    assert!(pages >= 3, "nine 64 KiB events take several pages: {pages}");
    let all: Vec<i64> = kernel
        .events(&id)
        .await
        .iter()
        .filter_map(|event| event["sequence"].as_i64())
        .collect();
    assert_eq!(sequences, all, "every event once, in order");
    assert!(all.len() >= 9);
    kernel.shutdown().await;
}

/// The execution stream replays a backlog of large events a `--max-page-bytes` read at a
/// time (`Store::events_within`): resumed from `Last-Event-ID: 0`, it still delivers every
/// event once, in order, through the terminal one, and then ends.
#[tokio::test]
async fn an_execution_stream_replays_a_large_backlog_in_bounded_reads_each_event_once() {
    let kernel = TestKernel::start_with(capped()).await;
    let created = kernel.create("bulky", json!(null)).await;
    let id = created["id"].as_str().expect("id").to_owned();
    // 40 × 64 KiB: ten or more reads of 256 KiB.
    for n in 0..40 {
        let (status, body) = kernel
            .post(
                &format!("/v0/executions/{id}/signal"),
                &json!({"signal_type": format!("s{n}"), "payload": {"blob": "y".repeat(BLOB)}}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let (status, body) = kernel
        .post_raw(&format!("/v0/executions/{id}/cancel"), "")
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let logged: Vec<String> = kernel
        .events(&id)
        .await
        .iter()
        .filter_map(|event| {
            event["sequence"]
                .as_i64()
                .map(|sequence| sequence.to_string())
        })
        .collect();
    assert!(
        logged.len() >= 42,
        "created, 40 signals, cancelled: {logged:?}"
    );
    let mut stream = kernel
        .sse_with(
            &format!("/v0/executions/{id}/stream"),
            &[("Last-Event-ID", "0")],
        )
        .await;
    let mut ids = Vec::new();
    let mut last_event = String::new();
    while let Some(message) = stream.next().await {
        ids.push(message.id.expect("every event has its id"));
        last_event = message.event;
    }
    assert_eq!(ids, logged, "every event once, in order");
    assert_eq!(last_event, "execution.cancelled");
    kernel.shutdown().await;
}

/// `keel_sse_connections{kind}` as the kernel counts it.
fn connections(kernel: &TestKernel, kind: &str) -> Option<i64> {
    let prefix = format!("keel_sse_connections{{kind=\"{kind}\"}} ");
    kernel
        .kernel
        .encode_metrics()
        .lines()
        .find_map(|line| line.strip_prefix(&prefix)?.trim().parse().ok())
}

#[tokio::test]
async fn a_stream_whose_client_reads_nothing_is_closed() {
    let kernel = TestKernel::start_with(Options {
        settings: HttpSettings {
            // The feed's own cut-off stays out of the way: only the stall deadline acts.
            feed: FeedSettings {
                cutoff: Duration::from_secs(600),
                ..FeedSettings::default()
            },
            ..Options::default().settings
        },
        timeouts: ConnectionTimeouts {
            write_stall: Duration::from_secs(1),
            ..ConnectionTimeouts::default()
        },
        ..Options::default()
    })
    .await;
    let address = kernel.base_url.trim_start_matches("http://").to_owned();
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("rcvbuf");
    let mut stalled = socket
        .connect(address.parse().expect("address"))
        .await
        .expect("connect");
    stalled
        .write_all(format!("GET /v0/events/stream HTTP/1.1\r\nHost: {address}\r\n\r\n").as_bytes())
        .await
        .expect("request");
    eventually("the stream is open", || async {
        (connections(&kernel, "feed") == Some(1)).then_some(())
    })
    .await;
    // Far more than the socket buffers hold.
    let blob = "x".repeat(BLOB);
    for _ in 0..160 {
        kernel.create("bulky", json!({ "blob": blob })).await;
    }
    eventually("the stalled stream is closed", || async {
        (connections(&kernel, "feed") == Some(0)).then_some(())
    })
    .await;
    // A client that reads is unaffected: it gets every event.
    let mut reading = kernel.sse("/v0/events/stream").await;
    for _ in 0..160 {
        let created = reading.next_of("execution.created").await;
        assert_eq!(created.data["agent_id"], json!("bulky"));
    }
    drop(stalled);
    kernel.shutdown().await;
}
