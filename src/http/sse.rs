//! SSE streams (WIRE.md §8): framing, heartbeats, shutdown, and the agent and runner streams;
//! the execution stream is in [`super::execution_stream`], the feed in [`super::feed`].
//!
//! * Agent and runner streams relay the kernel's [`PushStream`] (`event:` + `data:`); they end
//!   when the kernel ends the connection or the server shuts down. Dropping the body (client
//!   gone) drops the `PushStream`, which tells the kernel.
//! * The execution stream (§7.7) subscribes to commit notices *before* reading, replays every
//!   page of the log, then tails it; it ends right after a terminal event, or at once when the
//!   execution is terminal and nothing remains.
//!
//! Responses are never compressed and every message is its own body chunk, so it reaches the
//! socket at once (Corrections item 4).

use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::http::header::{CACHE_CONTROL, CONNECTION, CONTENT_TYPE};
use axum::http::{HeaderName, HeaderValue};
use axum::response::Response;
use futures::Stream;
use keel_actors::kernel::{Kernel, PushStream};
use tokio::time::{Instant, Interval, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use super::AppState;
use crate::console::PresenceGuard;

/// First bytes of every stream.
pub(super) const PREAMBLE: &[u8] = b"retry: 5000\n\n";
/// Comment sent every heartbeat period.
pub(super) const HEARTBEAT: &[u8] = b":heartbeat\n\n";

/// Which stream a connection is, for metrics and logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamKind {
    /// `GET /v0/agents/stream`.
    Agent,
    /// `GET /v0/runners/stream`.
    Runner,
    /// `GET /v0/executions/{id}/stream`.
    Execution,
    /// `GET /v0/events/stream`.
    Feed,
}

impl StreamKind {
    fn as_str(self) -> &'static str {
        match self {
            Self::Agent => "agent",
            Self::Runner => "runner",
            Self::Execution => "execution",
            Self::Feed => "feed",
        }
    }
}

/// Counts a connection in the kernel's metrics while it lives.
pub(super) struct ConnectionGuard {
    kernel: Kernel,
    kind: StreamKind,
}

impl ConnectionGuard {
    pub(super) fn new(kernel: &Kernel, kind: StreamKind) -> Self {
        kernel.metrics().sse_connected(kind.as_str());
        Self {
            kernel: kernel.clone(),
            kind,
        }
    }
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.kernel.metrics().sse_disconnected(self.kind.as_str());
        tracing::debug!(stream.kind = self.kind.as_str(), "sse stream closed");
    }
}

/// What every stream has: the heartbeat timer, the shutdown token and its metrics guard.
pub(super) struct Common {
    pub(super) heartbeat: Interval,
    pub(super) shutdown: CancellationToken,
    preamble_sent: bool,
    _guard: ConnectionGuard,
}

impl Common {
    pub(super) fn new(state: &AppState, kind: StreamKind) -> Self {
        let period = state.settings.heartbeat;
        let mut heartbeat = tokio::time::interval_at(Instant::now() + period, period);
        heartbeat.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Self {
            heartbeat,
            shutdown: state.shutdown.clone(),
            preamble_sent: false,
            _guard: ConnectionGuard::new(&state.kernel, kind),
        }
    }

    /// Returns the preamble the first time it is called.
    pub(super) fn preamble(&mut self) -> Option<Bytes> {
        if self.preamble_sent {
            return None;
        }
        self.preamble_sent = true;
        Some(Bytes::from_static(PREAMBLE))
    }
}

/// Returns the streaming response with the SSE headers of WIRE.md §8.
pub(super) fn sse_response(
    stream: impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static,
) -> Response {
    let mut response = Response::new(Body::from_stream(stream));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(CONNECTION, HeaderValue::from_static("keep-alive"));
    headers.insert(
        HeaderName::from_static("x-accel-buffering"),
        HeaderValue::from_static("no"),
    );
    response
}

/// Frames one message: optional `id:`, `event:`, one `data:` line per line of the JSON.
pub(super) fn frame(id: Option<i64>, event: &str, data: &str) -> Bytes {
    let mut text = String::with_capacity(data.len() + event.len() + 32);
    if let Some(id) = id {
        text.push_str(&format!("id: {id}\n"));
    }
    text.push_str("event: ");
    text.push_str(event);
    text.push('\n');
    for line in data.split('\n') {
        text.push_str("data: ");
        text.push_str(line);
        text.push('\n');
    }
    text.push('\n');
    Bytes::from(text)
}

/// Frames one message whose data is `data` as compact JSON, written straight into the frame
/// on one `data:` line (compact JSON has no line breaks: `\n` in a string is escaped).
/// Serializing to a `String` first, or through `Display`, would copy it once more.
pub(super) fn json_frame(id: Option<i64>, event: &str, data: &impl serde::Serialize) -> Bytes {
    let mut text = Vec::with_capacity(event.len() + 256);
    if let Some(id) = id {
        text.extend_from_slice(format!("id: {id}\n").as_bytes());
    }
    text.extend_from_slice(b"event: ");
    text.extend_from_slice(event.as_bytes());
    text.extend_from_slice(b"\ndata: ");
    // The kernel's events and pushes always serialize (their map keys are strings); should
    // one fail anyway, the message still goes out with `{}` for its data, and the log says why.
    if let Err(error) = serde_json::to_writer(&mut text, data) {
        tracing::error!(event, id, %error, "SSE data not serializable");
        return frame(id, event, "{}");
    }
    text.extend_from_slice(b"\n\n");
    Bytes::from(text)
}

/// Relays an agent or runner connection's pushes as an SSE response.
/// `presence` keeps the connection listed in the directory until the response ends.
/// In cluster mode `bridge` relays the same consumer's pushes from the other kernels.
pub fn push_response(
    state: &AppState,
    kind: StreamKind,
    pushes: PushStream,
    presence: PresenceGuard,
    bridge: Option<crate::cluster::bridge::Bridge>,
) -> Response {
    struct Relay {
        pushes: PushStream,
        common: Common,
        _presence: PresenceGuard,
        bridge: Option<crate::cluster::bridge::Bridge>,
    }
    let relay = Relay {
        pushes,
        common: Common::new(state, kind),
        _presence: presence,
        bridge,
    };
    let stream = futures::stream::unfold(relay, |mut relay| async move {
        if let Some(preamble) = relay.common.preamble() {
            return Some((Ok(preamble), relay));
        }
        let chunk = tokio::select! {
            biased;
            () = relay.common.shutdown.cancelled() => None,
            push = relay.pushes.next() => push.map(|push| json_frame(None, push.event, &push.data)),
            frame = bridged(&mut relay.bridge) => Some(frame),
            _ = relay.common.heartbeat.tick() => Some(Bytes::from_static(HEARTBEAT)),
        };
        chunk.map(|chunk| (Ok(chunk), relay))
    });
    sse_response(stream)
}

/// The next push relayed from another kernel; never resolves without a bridge.
async fn bridged(bridge: &mut Option<crate::cluster::bridge::Bridge>) -> Bytes {
    match bridge {
        Some(bridge) => bridge.next().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
#[path = "sse_tests.rs"]
mod tests;
