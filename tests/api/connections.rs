//! File descriptors (issue 38, item 5): a connection that sends nothing is closed after the
//! first-byte deadline, connections past `--max-connections` are closed at once with a warning,
//! and an authentication failure ends its connection with `Connection: close`; clients that
//! speak keep their connections.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use keel::http::{ConnectionTimeouts, HttpSettings};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::harness::{Options, TestKernel};

fn limited(first_byte: Duration, max_connections: usize) -> Options {
    Options {
        timeouts: ConnectionTimeouts {
            first_byte,
            max_connections,
            idle: Duration::from_secs(30),
            ..ConnectionTimeouts::default()
        },
        ..Options::default()
    }
}

fn address(kernel: &TestKernel) -> String {
    kernel.base_url.trim_start_matches("http://").to_owned()
}

/// How long until the server ends `stream` (EOF or reset), if it does within `within`, and the
/// bytes it sent.
async fn closed_after(stream: &mut TcpStream, within: Duration) -> (Option<Duration>, Vec<u8>) {
    let started = Instant::now();
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    let read = async {
        loop {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => return started.elapsed(),
                Ok(count) => received.extend_from_slice(&buffer[..count]),
            }
        }
    };
    let elapsed = tokio::time::timeout(within, read).await.ok();
    (elapsed, received)
}

/// Sends a health request on `stream` and reads its whole answer; returns its head.
async fn health(stream: &mut TcpStream) -> String {
    stream
        .write_all(b"GET /v0/health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .expect("request written");
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    let read = async {
        loop {
            let text = String::from_utf8_lossy(&received).to_string();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length = head
                    .lines()
                    .find_map(|line| {
                        let (name, value) = line.split_once(':')?;
                        name.eq_ignore_ascii_case("content-length")
                            .then(|| value.trim().parse::<usize>().ok())?
                    })
                    .unwrap_or(0);
                if body.len() >= length {
                    return head.to_owned();
                }
            }
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => return String::new(),
                Ok(count) => received.extend_from_slice(&buffer[..count]),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .unwrap_or_default()
}

#[tokio::test]
async fn a_silent_connection_is_closed_after_the_first_byte_deadline() {
    let kernel = TestKernel::start_with(limited(Duration::from_secs(1), 100)).await;
    let address = address(&kernel);
    let mut silent = TcpStream::connect(&address).await.expect("connect");
    let (closed, sent) = closed_after(&mut silent, Duration::from_secs(8)).await;
    let closed = closed.expect("the silent connection was closed");
    assert!(
        closed >= Duration::from_millis(900),
        "not before the deadline: {closed:?}"
    );
    assert!(sent.is_empty(), "nothing was answered: {sent:?}");

    // A client that spoke is held to the idle deadline (30 s here), not the first-byte one.
    let mut speaking = TcpStream::connect(&address).await.expect("connect");
    assert!(health(&mut speaking).await.starts_with("HTTP/1.1 200"));
    let (closed, _) = closed_after(&mut speaking, Duration::from_secs(2)).await;
    assert_eq!(
        closed, None,
        "a keep-alive connection outlives the first-byte deadline"
    );
    assert!(
        health(&mut speaking).await.starts_with("HTTP/1.1 200"),
        "and still answers"
    );
    kernel.shutdown().await;
}

/// A log writer the test reads back.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(
            &self
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
        .to_string()
    }
}

#[tokio::test]
async fn connections_past_the_cap_are_closed_and_logged() {
    // The kernel runs on this test's thread: a thread-local subscriber sees its warnings.
    let logs = Captured::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let kernel = TestKernel::start_with(limited(Duration::from_secs(10), 3)).await;
    let address = address(&kernel);
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut stream = TcpStream::connect(&address).await.expect("connect");
        assert!(health(&mut stream).await.starts_with("HTTP/1.1 200"));
        held.push(stream);
    }
    let mut extra = TcpStream::connect(&address).await.expect("connect");
    let _ = extra
        .write_all(b"GET /v0/health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await;
    let (closed, sent) = closed_after(&mut extra, Duration::from_secs(5)).await;
    assert!(closed.is_some(), "the connection past the cap was closed");
    assert!(sent.is_empty(), "and not served: {sent:?}");
    assert!(
        logs.text()
            .contains("connection limit reached (--max-connections 3)"),
        "a warning names the limit: {}",
        logs.text()
    );
    // The held connections still work; once one ends, a new connection is served.
    for stream in &mut held {
        assert!(health(stream).await.starts_with("HTTP/1.1 200"));
    }
    drop(held.pop());
    crate::harness::eventually("a freed slot serves a new connection", || {
        let address = address.clone();
        async move {
            let mut stream = TcpStream::connect(&address).await.ok()?;
            health(&mut stream)
                .await
                .starts_with("HTTP/1.1 200")
                .then_some(())
        }
    })
    .await;
    kernel.shutdown().await;
}

#[tokio::test]
async fn an_authentication_failure_closes_its_connection() {
    let kernel = TestKernel::start_with(Options {
        settings: HttpSettings {
            bearer_token: Some("s3cret".to_owned()),
            ..Options::default().settings
        },
        ..Options::default()
    })
    .await;
    let address = address(&kernel);
    let mut stream = TcpStream::connect(&address).await.expect("connect");
    stream
        .write_all(b"GET /v0/executions HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer wrong\r\n\r\n")
        .await
        .expect("request written");
    let (closed, sent) = closed_after(&mut stream, Duration::from_secs(5)).await;
    let head = String::from_utf8_lossy(&sent).to_lowercase();
    assert!(head.starts_with("http/1.1 401"), "{head}");
    assert!(head.contains("connection: close"), "{head}");
    assert!(closed.is_some(), "the connection ended with the 401");
    // The right token is served as before.
    let mut good = TcpStream::connect(&address).await.expect("connect");
    good.write_all(
        b"GET /v0/executions HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer s3cret\r\n\r\n",
    )
    .await
    .expect("request written");
    let mut buffer = [0u8; 64];
    let count = tokio::time::timeout(Duration::from_secs(10), good.read(&mut buffer))
        .await
        .expect("answered in time")
        .expect("read");
    assert!(buffer[..count].starts_with(b"HTTP/1.1 200"));
    kernel.shutdown().await;
}
