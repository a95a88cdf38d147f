//! The kernel-wide event feed (docs/events.md): `GET /v0/events` pages and the
//! `GET /v0/events/stream` SSE stream over every execution in position order, with filters,
//! resume by position and `Last-Event-ID` across a restart, and the slow-consumer cut-off.

use std::collections::BTreeSet;
use std::time::Duration;

use keel::http::HttpSettings;
use keel::http::feed::FeedSettings;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;

use crate::harness::{Options, SseClient, TestKernel, WAIT, assert_error, eventually};

/// Reads every page of `/v0/events?{query}` and returns the events.
async fn all_events(kernel: &TestKernel, query: &str) -> Vec<Value> {
    let mut events = Vec::new();
    let mut after = 0;
    loop {
        let (status, body) = kernel
            .get(&format!(
                "/v0/events?after_position={after}&limit=7&{query}"
            ))
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        events.extend(body["events"].as_array().expect("events").iter().cloned());
        let next = body["next_after_position"].as_i64().expect("next");
        assert!(next >= after, "{body}");
        after = next;
        if body["has_more"] != json!(true) {
            return events;
        }
    }
}

fn positions(events: &[Value]) -> Vec<i64> {
    events
        .iter()
        .map(|event| event["position"].as_i64().expect("position"))
        .collect()
}

async fn create_labelled(kernel: &TestKernel, agent: &str, team: &str) -> String {
    let (status, body) = kernel
        .post(
            "/v0/executions",
            &json!({"agent_id": agent, "input": {"n": 1}, "labels": {"team": team}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body["id"].as_str().expect("id").to_owned()
}

#[tokio::test]
async fn pages_cover_every_execution_in_position_order_and_filter() {
    let kernel = TestKernel::start().await;
    let a1 = create_labelled(&kernel, "agent-a", "red").await;
    let b1 = create_labelled(&kernel, "agent-b", "blue").await;
    let a2 = create_labelled(&kernel, "agent-a", "blue").await;
    for id in [&a1, &b1] {
        let (status, _) = kernel
            .post(
                &format!("/v0/executions/{id}/signal"),
                &json!({"signal_type": "go"}),
            )
            .await;
        assert_eq!(status, StatusCode::OK);
    }
    let (status, _) = kernel
        .post(&format!("/v0/executions/{a2}/cancel"), &json!({}))
        .await;
    assert_eq!(status, StatusCode::OK);

    let every = all_events(&kernel, "").await;
    let all_positions = positions(&every);
    assert!(
        all_positions.windows(2).all(|pair| pair[0] < pair[1]),
        "{all_positions:?}"
    );
    // The feed holds exactly the events of the three logs, each once.
    let mut expected = 0;
    for id in [&a1, &b1, &a2] {
        let log = kernel.events(id).await;
        expected += log.len();
        for event in &log {
            let found: Vec<&Value> = every.iter().filter(|e| e["id"] == event["id"]).collect();
            assert_eq!(found.len(), 1, "{event}");
            assert_eq!(found[0]["sequence"], event["sequence"]);
            assert_eq!(found[0]["type"], event["type"]);
        }
    }
    assert_eq!(every.len(), expected);
    assert!(every.iter().all(|e| e["agent_id"].is_string()));

    let created = all_events(&kernel, "types=execution.created").await;
    assert_eq!(created.len(), 3);
    let mixed = all_events(&kernel, "types=signal.*,execution.cancelled").await;
    let types: BTreeSet<&str> = mixed
        .iter()
        .map(|e| e["type"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        types,
        BTreeSet::from(["signal.received", "execution.cancelled"])
    );
    assert_eq!(mixed.len(), 3);
    let agent_a = all_events(&kernel, "agent_id=agent-a").await;
    assert!(
        agent_a
            .iter()
            .all(|e| e["execution_id"] == a1 || e["execution_id"] == a2)
    );
    assert_eq!(
        agent_a.len(),
        kernel.events(&a1).await.len() + kernel.events(&a2).await.len()
    );
    let blue = all_events(&kernel, "label=team:blue&types=execution.created").await;
    let ids: BTreeSet<&str> = blue
        .iter()
        .map(|e| e["execution_id"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(ids, BTreeSet::from([b1.as_str(), a2.as_str()]));
    let one = all_events(&kernel, &format!("execution_id={b1}")).await;
    assert_eq!(one.len(), kernel.events(&b1).await.len());

    // A type filter fills the page up to `limit` matches however many events it skips, and
    // `has_more` is true only while matches remain.
    let (status, body) = kernel.get("/v0/events?types=no.such&limit=2").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["events"], json!([]));
    assert_eq!(
        body["next_after_position"],
        json!(all_positions.last().unwrap())
    );
    assert_eq!(body["has_more"], json!(false));
    let created = all_events(&kernel, "types=execution.created").await;
    assert!(created.len() >= 3, "{created:?}");
    let (_, first) = kernel
        .get("/v0/events?types=execution.created&limit=2")
        .await;
    assert_eq!(first["events"].as_array().unwrap().len(), 2, "{first}");
    assert_eq!(first["has_more"], json!(true));
    let mut seen = first["events"].as_array().unwrap().clone();
    let mut after = first["next_after_position"].as_i64().unwrap();
    loop {
        let (_, page) = kernel
            .get(&format!(
                "/v0/events?types=execution.created&limit=2&after_position={after}"
            ))
            .await;
        let events = page["events"].as_array().unwrap();
        seen.extend(events.iter().cloned());
        after = page["next_after_position"].as_i64().unwrap();
        if page["has_more"] == json!(false) {
            break;
        }
        assert_eq!(events.len(), 2, "a page with more to come is full: {page}");
    }
    assert_eq!(seen, created);
    // Without a type filter, a page that ends exactly at the end of the log says so.
    let total = all_positions.len();
    let (_, whole) = kernel.get(&format!("/v0/events?limit={total}")).await;
    assert_eq!(whole["events"].as_array().unwrap().len(), total);
    assert_eq!(whole["has_more"], json!(false), "{whole}");

    // Bad inputs are refused with the envelope.
    for query in [
        "types=step.crea*",
        "after_position=-1",
        "after_position=x",
        "limit=0",
        "label=nocolon",
    ] {
        let response = kernel.get(&format!("/v0/events?{query}")).await;
        assert_error(&response, StatusCode::BAD_REQUEST, "VALIDATION_ERROR", None);
        if !query.starts_with("limit") {
            let response = kernel.get(&format!("/v0/events/stream?{query}")).await;
            assert_error(&response, StatusCode::BAD_REQUEST, "VALIDATION_ERROR", None);
        }
    }
    let bad_header = kernel
        .send(
            kernel
                .client
                .get(kernel.url("/v0/events/stream"))
                .header("last-event-id", "abc"),
        )
        .await;
    assert_error(
        &bad_header,
        StatusCode::BAD_REQUEST,
        "VALIDATION_ERROR",
        None,
    );
    kernel.shutdown().await;
}

/// Writes from many executions at once: each task creates executions and signals them.
async fn interleaved_writes(kernel: &TestKernel, tasks: usize, per_task: usize) {
    let mut handles = Vec::new();
    for task in 0..tasks {
        let client = kernel.client.clone();
        let base = kernel.base_url.clone();
        handles.push(tokio::spawn(async move {
            for round in 0..per_task {
                let created: Value = client
                    .post(format!("{base}/v0/executions"))
                    .json(&json!({"agent_id": format!("agent-{task}"), "input": {"round": round}}))
                    .send()
                    .await
                    .expect("create")
                    .json()
                    .await
                    .expect("json");
                let id = created["id"].as_str().expect("id").to_owned();
                for signal in 0..2 {
                    let response = client
                        .post(format!("{base}/v0/executions/{id}/signal"))
                        .json(&json!({"signal_type": format!("s{signal}")}))
                        .send()
                        .await
                        .expect("signal");
                    let status = response.status();
                    let body = response.text().await.unwrap_or_default();
                    assert_eq!(status, StatusCode::OK, "signal to {id}: {body}");
                }
            }
        }));
    }
    for handle in handles {
        handle.await.expect("writer task");
    }
}

/// Reads `count` events off `stream`, returning their positions (from `id:`) and checking
/// that `id:` and the JSON's `position` agree.
async fn take(stream: &mut SseClient, count: usize) -> Vec<i64> {
    let mut seen = Vec::new();
    while seen.len() < count {
        let message = stream.next().await.expect("stream open");
        let id: i64 = message
            .id
            .as_deref()
            .expect("id")
            .parse()
            .expect("numeric id");
        assert_eq!(message.data["position"], json!(id));
        assert_eq!(message.data["type"], json!(message.event));
        seen.push(id);
    }
    seen
}

async fn open(kernel: &TestKernel, last_event_id: Option<i64>, query: &str) -> SseClient {
    let mut request = kernel
        .client
        .get(kernel.url(&format!("/v0/events/stream{query}")));
    if let Some(id) = last_event_id {
        request = request.header("last-event-id", id.to_string());
    }
    let response = request.send().await.expect("stream opens");
    assert_eq!(response.status(), StatusCode::OK);
    SseClient::new(response)
}

#[tokio::test]
async fn the_stream_resumes_by_last_event_id_and_position_across_a_restart_without_gap_or_duplicate()
 {
    let kernel = TestKernel::start().await;
    // Some history before anyone listens.
    interleaved_writes(&kernel, 4, 2).await;
    let mut stream = open(&kernel, None, "").await;
    let writer = {
        let client = kernel.client.clone();
        let base = kernel.base_url.clone();
        tokio::spawn(async move {
            // Concurrent creations while the first reader replays and tails.
            for round in 0..20 {
                let _ = client
                    .post(format!("{base}/v0/executions"))
                    .json(&json!({"agent_id": "agent-live", "input": round}))
                    .send()
                    .await;
            }
        })
    };
    let mut seen = take(&mut stream, 15).await;
    drop(stream);
    writer.await.expect("writer");
    // Reconnect as an EventSource would: same URL (no position), `Last-Event-ID` header.
    let mut stream = open(&kernel, seen.last().copied(), "?after_position=0").await;
    let more_writes = interleaved_writes(&kernel, 6, 2);
    let (_, more) = tokio::join!(more_writes, take(&mut stream, 20));
    seen.extend(more);
    drop(stream);

    // Restart the kernel, write more, and resume with `after_position`.
    let kernel = kernel.restart(Options::default()).await;
    interleaved_writes(&kernel, 5, 2).await;
    let head = *positions(&all_events(&kernel, "").await)
        .last()
        .expect("events");
    let mut stream = open(
        &kernel,
        None,
        &format!("?after_position={}", seen.last().expect("seen")),
    )
    .await;
    while seen.last().copied() < Some(head) {
        seen.extend(take(&mut stream, 1).await);
    }

    let expected = positions(&all_events(&kernel, "").await);
    assert_eq!(
        seen, expected,
        "the stream delivered every position once, in order"
    );
    // And it keeps tailing: a new commit arrives live.
    let id = kernel.create("agent-after", json!(null)).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let message = stream.next_of("execution.created").await;
    assert_eq!(message.data["execution_id"], json!(id));
    assert!(message.data["position"].as_i64() > Some(head));
    kernel.shutdown().await;
}

#[tokio::test]
async fn a_consumer_that_stops_reading_is_cut_off_and_resumes_from_its_position() {
    let kernel = TestKernel::start_with(Options {
        settings: HttpSettings {
            heartbeat: Duration::from_millis(300),
            feed: FeedSettings {
                buffer: 4,
                cutoff: Duration::from_millis(300),
                ..FeedSettings::default()
            },
            ..HttpSettings::default()
        },
        ..Options::default()
    })
    .await;
    // A raw connection with a small receive buffer that reads nothing for now.
    let address = kernel.base_url.trim_start_matches("http://").to_owned();
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("rcvbuf");
    let mut connection = socket
        .connect(address.parse().expect("address"))
        .await
        .expect("connect");
    use tokio::io::AsyncWriteExt;
    connection
        .write_all(format!("GET /v0/events/stream HTTP/1.1\r\nHost: {address}\r\n\r\n").as_bytes())
        .await
        .expect("request");
    // Far more than the socket buffers (a few MB on loopback) and the stream's channel hold.
    let big = "x".repeat(64 * 1024);
    for _ in 0..120 {
        kernel.create("bulky", json!({ "blob": big })).await;
    }
    eventually("the slow consumer is cut off", || async {
        let metrics = kernel.kernel.encode_metrics();
        metrics
            .contains("keel_slow_consumers_disconnected_total{kind=\"feed\"} 1")
            .then_some(())
    })
    .await;
    // What it got before the cut-off ends with the end of the (chunked) response while the
    // kernel runs on.
    let mut received = Vec::new();
    tokio::time::timeout(WAIT, async {
        let mut buffer = vec![0_u8; 64 * 1024];
        while !received.ends_with(b"\r\n0\r\n\r\n") {
            let read = connection.read(&mut buffer).await.expect("read");
            assert!(read > 0, "connection closed before the response ended");
            received.extend_from_slice(&buffer[..read]);
        }
    })
    .await
    .expect("the response ends");
    let text = String::from_utf8_lossy(&received);
    let ids: Vec<i64> = text
        .lines()
        .filter_map(|line| line.strip_prefix("id: "))
        .map(|id| id.parse().expect("numeric id"))
        .collect();
    let all = positions(&all_events(&kernel, "").await);
    assert!(
        ids.len() < all.len(),
        "cut off before the end ({} of {})",
        ids.len(),
        all.len()
    );
    assert_eq!(ids, all[..ids.len()].to_vec());
    // It resumes from the last position it saw and gets the rest, each once.
    let mut stream = open(&kernel, ids.last().copied(), "").await;
    let rest = take(&mut stream, all.len() - ids.len()).await;
    assert_eq!(rest, all[ids.len()..].to_vec());
    kernel.shutdown().await;
}
