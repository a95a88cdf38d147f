//! Slow clients (issue 9, part 2): a client sending its request head a byte at a time is cut
//! off after the header-read timeout, a body that does not arrive within the body-read
//! timeout is refused, and neither deadline touches normal requests, idle keep-alive
//! connections or SSE streams. The kernels here use 1 s deadlines so the tests stay short.

use std::time::{Duration, Instant};

use keel::http::{ConnectionTimeouts, HttpSettings};
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::harness::{Options, TestAgent, TestKernel};

const HEADER_READ: Duration = Duration::from_secs(1);

fn short_deadlines() -> Options {
    Options {
        settings: HttpSettings {
            body_read_timeout: Duration::from_secs(1),
            ..Options::default().settings
        },
        timeouts: ConnectionTimeouts {
            header_read: HEADER_READ,
            idle: Duration::from_secs(30),
            ..ConnectionTimeouts::default()
        },
        ..Options::default()
    }
}

fn address(kernel: &TestKernel) -> String {
    kernel.base_url.trim_start_matches("http://").to_owned()
}

/// Sends a request head one byte every 200 ms and returns how long after the first byte the
/// server closed the connection (`None` if it had not after 8 s), and what it sent.
async fn slow_head(address: String) -> (Option<Duration>, Vec<u8>) {
    let head = b"GET /v0/health HTTP/1.1\r\nHost: localhost\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    let stream = TcpStream::connect(&address).await.expect("connect");
    let (mut reader, mut writer) = stream.into_split();
    let started = Instant::now();
    let closed = tokio::spawn(async move {
        let mut received = Vec::new();
        let mut buffer = [0u8; 1024];
        loop {
            match reader.read(&mut buffer).await {
                Ok(0) | Err(_) => return (started.elapsed(), received),
                Ok(count) => received.extend_from_slice(&buffer[..count]),
            }
        }
    });
    for byte in head.iter().take(40) {
        if closed.is_finished() || writer.write_all(&[*byte]).await.is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    match tokio::time::timeout(Duration::from_millis(100), closed).await {
        Ok(Ok((elapsed, received))) => (Some(elapsed), received),
        _ => (None, Vec::new()),
    }
}

/// Writes `request` on `stream` and reads one response; returns its status line and body.
async fn exchange(stream: &mut TcpStream, request: &str) -> (String, String) {
    stream
        .write_all(request.as_bytes())
        .await
        .expect("request written");
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    let read = async {
        loop {
            if let Some(end) = find(&received, b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&received[..end]).to_string();
                let length = head
                    .lines()
                    .find_map(|line| {
                        let (name, value) = line.split_once(':')?;
                        name.eq_ignore_ascii_case("content-length")
                            .then(|| value.trim().parse::<usize>().ok())?
                    })
                    .unwrap_or(0);
                if received.len() >= end + 4 + length {
                    let body = String::from_utf8_lossy(&received[end + 4..end + 4 + length]);
                    let status = head.lines().next().unwrap_or_default().to_owned();
                    return (status, body.to_string());
                }
            }
            let count = stream.read(&mut buffer).await.expect("response read");
            assert!(count > 0, "connection closed before the response");
            received.extend_from_slice(&buffer[..count]);
        }
    };
    tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .expect("response in time")
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

#[tokio::test]
async fn slow_request_heads_are_cut_off_and_normal_traffic_is_not() {
    let kernel = TestKernel::start_with(short_deadlines()).await;
    let mut agent = TestAgent::connect(&kernel, "steady").await;
    let mut keep_alive = TcpStream::connect(address(&kernel)).await.expect("connect");
    let health = "GET /v0/health HTTP/1.1\r\nHost: localhost\r\n\r\n";
    let (status, _) = exchange(&mut keep_alive, health).await;
    assert_eq!(status, "HTTP/1.1 200 OK");

    let attackers: Vec<_> = (0..50)
        .map(|_| tokio::spawn(slow_head(address(&kernel))))
        .collect();
    // Normal requests while 50 connections trickle their heads.
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(1500) {
        let created = kernel.create("steady", json!({"n": 1})).await;
        assert_eq!(created["agent_id"], "steady");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    for attacker in attackers {
        let (closed_after, received) = attacker.await.expect("attacker task");
        let closed_after = closed_after.expect("the slow connection was closed");
        assert!(
            closed_after >= HEADER_READ - Duration::from_millis(100)
                && closed_after < HEADER_READ * 3,
            "closed after {closed_after:?}"
        );
        assert!(
            !String::from_utf8_lossy(&received).contains("200 OK"),
            "the slow request was never served"
        );
    }
    // An idle keep-alive connection outlives the header deadline and still serves requests.
    let (status, body) = exchange(&mut keep_alive, health).await;
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert_eq!(
        serde_json::from_str::<Value>(&body).expect("JSON"),
        json!({"status": "ok"})
    );
    // The SSE stream opened before the attack still delivers (it is answering a request: no
    // read deadline applies to it).
    let last = kernel.create("steady", json!({"last": true})).await;
    loop {
        let assigned = agent.assignment().await;
        if assigned.execution_id == last["id"] {
            break;
        }
    }
    kernel.shutdown().await;
}

#[tokio::test]
async fn a_body_that_does_not_arrive_in_time_is_refused_and_records_nothing() {
    let kernel = TestKernel::start_with(short_deadlines()).await;
    let mut stream = TcpStream::connect(address(&kernel)).await.expect("connect");
    let started = Instant::now();
    let request = "POST /v0/executions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"agent_id\":";
    let (status, body) = exchange(&mut stream, request).await;
    let elapsed = started.elapsed();
    assert_eq!(status, "HTTP/1.1 400 Bad Request");
    assert_eq!(
        serde_json::from_str::<Value>(&body).expect("JSON"),
        json!({"error": "validation error: request body not received within 1s",
            "code": "VALIDATION_ERROR"})
    );
    assert!(elapsed >= Duration::from_millis(900), "{elapsed:?}");
    let (status, list) = kernel.get("/v0/executions").await;
    assert_eq!((status, &list["executions"]), (StatusCode::OK, &json!([])));
    kernel.shutdown().await;
}
