//! Answers given before the request body was read (issue 38, item 9): a keep-alive client
//! whose body follows its headers in a separate write, answered early (401, a refused header,
//! an unknown route, an oversized body), always gets the answer to the valid request it sends
//! next — on the same connection, or on a new one because the early answer said
//! `Connection: close`. A connection whose answer does not say so stays usable.

use std::time::Duration;

use keel::http::HttpSettings;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::harness::{Options, TestKernel};

const TOKEN: &str = "s3cret";

/// One response read off a connection.
#[derive(Debug)]
struct Answer {
    status: u16,
    head: String,
}

impl Answer {
    fn closes(&self) -> bool {
        self.head.lines().any(|line| {
            line.split_once(':').is_some_and(|(name, value)| {
                name.eq_ignore_ascii_case("connection")
                    && value.trim().eq_ignore_ascii_case("close")
            })
        })
    }
}

/// Reads one response (head and `Content-Length` body) from `stream`; `None` when the
/// connection ends first.
async fn read_answer(stream: &mut TcpStream, pending: &mut Vec<u8>) -> Option<Answer> {
    let mut buffer = [0u8; 4096];
    let read = async {
        loop {
            if let Some(end) = find(pending, b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&pending[..end]).to_string();
                let length = head
                    .lines()
                    .find_map(|line| {
                        let (name, value) = line.split_once(':')?;
                        name.eq_ignore_ascii_case("content-length")
                            .then(|| value.trim().parse::<usize>().ok())?
                    })
                    .unwrap_or(0);
                if pending.len() >= end + 4 + length {
                    pending.drain(..end + 4 + length);
                    let status = head.split(' ').nth(1)?.parse().ok()?;
                    return Some(Answer { status, head });
                }
            }
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => return None,
                Ok(count) => pending.extend_from_slice(&buffer[..count]),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .ok()
        .flatten()
}

/// Whether the server ends `stream` (EOF or reset) within a few seconds.
async fn ends(stream: &mut TcpStream) -> bool {
    let mut buffer = [0u8; 256];
    matches!(
        tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buffer)).await,
        Ok(Ok(0) | Err(_))
    )
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

fn valid_request() -> String {
    format!(
        "GET /v0/executions HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
    )
}

/// A POST head with a `Content-Length` of `body_len` and `headers`.
fn post_head(path: &str, headers: &str, body_len: usize) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n{headers}Content-Length: {body_len}\r\n\r\n"
    )
}

/// How one early answer ended.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// The early answer kept the connection, which then answered the valid request.
    Kept,
    /// The early answer said `Connection: close`, the server closed, and a new connection
    /// answered the valid request.
    Closed,
}

/// Sends `head`, waits for its answer (given before any body byte was sent), then sends the
/// body and the valid request the way a pooled client does. Fails the test when the valid
/// request goes unanswered on a connection the early answer did not close.
async fn answered_before_the_body(
    address: &str,
    head: &str,
    body: &[u8],
    expected: u16,
) -> Outcome {
    let mut stream = TcpStream::connect(address).await.expect("connect");
    stream
        .write_all(head.as_bytes())
        .await
        .expect("head written");
    let mut pending = Vec::new();
    let early = read_answer(&mut stream, &mut pending)
        .await
        .expect("the early answer arrives");
    assert_eq!(early.status, expected, "{head}: {}", early.head);
    settle(address, stream, pending, early, body).await
}

/// Sends `head`, then after a pause (the kernel answers in it) the body and the valid request.
async fn body_after_a_pause(address: &str, head: &str, body: &[u8], expected: u16) -> Outcome {
    let mut stream = TcpStream::connect(address).await.expect("connect");
    stream
        .write_all(head.as_bytes())
        .await
        .expect("head written");
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut pending = Vec::new();
    // The body and the valid request may meet a closed socket: then the answer said so.
    let _ = stream.write_all(body).await;
    let _ = stream.write_all(valid_request().as_bytes()).await;
    let early = read_answer(&mut stream, &mut pending)
        .await
        .expect("the early answer arrives");
    assert_eq!(early.status, expected, "{head}: {}", early.head);
    if early.closes() {
        assert!(ends(&mut stream).await, "closed as announced");
        return answer_on_a_new_connection(address).await;
    }
    let valid = read_answer(&mut stream, &mut pending).await;
    assert_eq!(
        valid.map(|answer| answer.status),
        Some(200),
        "{head}: the valid request after a kept-alive early answer ({}) is answered",
        early.head
    );
    Outcome::Kept
}

async fn settle(
    address: &str,
    mut stream: TcpStream,
    mut pending: Vec<u8>,
    early: Answer,
    body: &[u8],
) -> Outcome {
    if early.closes() {
        assert!(ends(&mut stream).await, "closed as announced");
        return answer_on_a_new_connection(address).await;
    }
    let _ = stream.write_all(body).await;
    let _ = stream.write_all(valid_request().as_bytes()).await;
    let valid = read_answer(&mut stream, &mut pending).await;
    assert_eq!(
        valid.map(|answer| answer.status),
        Some(200),
        "the valid request after a kept-alive early answer ({}) is answered",
        early.head
    );
    Outcome::Kept
}

async fn answer_on_a_new_connection(address: &str) -> Outcome {
    let mut fresh = TcpStream::connect(address).await.expect("connect");
    fresh
        .write_all(valid_request().as_bytes())
        .await
        .expect("written");
    let answer = read_answer(&mut fresh, &mut Vec::new()).await;
    assert_eq!(answer.map(|answer| answer.status), Some(200));
    Outcome::Closed
}

fn kernel_options() -> Options {
    Options {
        settings: HttpSettings {
            bearer_token: Some(TOKEN.to_owned()),
            body_limit: 4096,
            ..Options::default().settings
        },
        ..Options::default()
    }
}

#[tokio::test]
async fn an_early_answer_never_breaks_the_next_request_on_its_connection() {
    let kernel = TestKernel::start_with(kernel_options()).await;
    let address = kernel.base_url.trim_start_matches("http://").to_owned();
    let body = br#"{"agent_id":"early","input":{"pad":"xxxxxxxxxxxxxxxx"}}"#;
    let authorized = format!("Authorization: Bearer {TOKEN}\r\n");
    let cases = [
        // A bad token: 401, and the connection closes, saying so.
        (
            post_head(
                "/v0/executions",
                "Authorization: Bearer wrong\r\n",
                body.len(),
            ),
            401,
            Outcome::Closed,
        ),
        // A header refused before the body is read.
        (
            post_head(
                "/v0/executions",
                &format!("{authorized}Idempotency-Key: \r\n"),
                body.len(),
            ),
            400,
            Outcome::Closed,
        ),
        // An unknown route never reads the body.
        (
            post_head("/v0/nowhere", &authorized, body.len()),
            404,
            Outcome::Closed,
        ),
    ];
    // The client waits for the early answer before sending its body: the kernel cannot
    // drain it, so it must say `Connection: close`.
    for (head, status, outcome) in &cases {
        for _ in 0..3 {
            assert_eq!(
                answered_before_the_body(&address, head, body, *status).await,
                *outcome,
                "{head}"
            );
        }
    }
    // The body follows the head after a pause: a small unread body is drained and the
    // connection kept; a bad token still closes it.
    let mut kept = 0;
    for round in 0..10 {
        for (head, status, _) in &cases {
            let outcome = body_after_a_pause(&address, head, body, *status).await;
            if *status == 401 {
                assert_eq!(outcome, Outcome::Closed, "round {round}");
            } else if outcome == Outcome::Kept {
                kept += 1;
            }
        }
    }
    assert!(
        kept >= 10,
        "only {kept} of 20 drained answers kept their connection"
    );
    // An oversized body (past --body-limit) is read and refused; the connection stays usable.
    let large = vec![b' '; 8192];
    let oversized = post_head("/v0/executions", &authorized, large.len());
    assert_eq!(
        body_after_a_pause(&address, &oversized, &large, 400).await,
        Outcome::Kept
    );
    // Nothing was created by any of them.
    let (status, listed) = kernel.get("/v0/executions").await;
    assert_eq!(status, 200);
    assert_eq!(
        listed["executions"].as_array().map(Vec::len),
        Some(0),
        "{listed}"
    );
    kernel.shutdown().await;
}
