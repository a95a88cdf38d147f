//! SSE streams (WIRE.md §8): framing, heartbeats, shutdown, and the three streams.
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

use std::collections::VecDeque;
use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::header::{CACHE_CONTROL, CONNECTION, CONTENT_TYPE};
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use axum::response::Response;
use futures::Stream;
use keel_actors::events::{Event, is_terminal_type};
use keel_actors::ids::ExecutionId;
use keel_actors::kernel::{CommitNotice, Kernel, KernelError, PushStream};
use keel_actors::store::Batch;
use tokio::sync::broadcast;
use tokio::time::{Instant, Interval, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use super::AppState;
use super::error::ApiError;
use super::executions::path_id;
use super::query::QueryParams;
use crate::console::PresenceGuard;

/// First bytes of every stream.
pub(super) const PREAMBLE: &[u8] = b"retry: 5000\n\n";
/// Comment sent every heartbeat period.
pub(super) const HEARTBEAT: &[u8] = b":heartbeat\n\n";
/// Events read from the store per page while replaying; a page also stops once it passes
/// `--max-page-bytes` of payloads, so a backlog of large events is loaded a bounded amount at
/// a time.
const PAGE: i64 = 1000;

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
struct Common {
    heartbeat: Interval,
    shutdown: CancellationToken,
    preamble_sent: bool,
    _guard: ConnectionGuard,
}

impl Common {
    fn new(state: &AppState, kind: StreamKind) -> Self {
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
    fn preamble(&mut self) -> Option<Bytes> {
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

/// `GET /v0/executions/{id}/stream?after_sequence=`: the live event stream (WIRE.md §7.7).
/// A `Last-Event-ID` header (what `EventSource` and SSE libraries send when they reconnect,
/// with the original URL) counts as `after_sequence`; with both, the later sequence wins.
pub async fn execution_stream(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let id = ExecutionId::new(path_id(path)?);
    let from_query = QueryParams::parse(raw.as_deref(), &[])?
        .get("after_sequence")
        .and_then(|text| text.parse::<i64>().ok());
    let after_sequence = resume_after(from_query, headers.get(LAST_EVENT_ID));
    // Subscribe before the first read, so no commit between the read and the wait is missed.
    let notices = state.kernel.subscribe_commits();
    state.kernel.execution(&id).await?;
    // Cluster mode: the stream ends when this kernel stops owning the execution.
    let fence = state.settings.cluster.as_ref().map(|routing| {
        crate::cluster::handover::StreamFence::new(routing.ownership().clone(), &id)
    });
    let tail = Tail {
        fence,
        kernel: state.kernel.clone(),
        id,
        cursor: after_sequence,
        read_bytes: i64::try_from(state.settings.max_page_bytes).unwrap_or(i64::MAX),
        buffer: VecDeque::new(),
        need_read: true,
        done: false,
        notices,
        common: Common::new(&state, StreamKind::Execution),
    };
    Ok(sse_response(futures::stream::unfold(
        tail,
        |mut tail| async move { tail.next_chunk().await.map(|chunk| (Ok(chunk), tail)) },
    )))
}

/// The `Last-Event-ID` request header of SSE reconnects.
const LAST_EVENT_ID: &str = "last-event-id";

/// Returns the sequence an execution stream resumes after: the larger of the query's
/// `after_sequence` and a numeric `Last-Event-ID`; anything unparsable counts as absent.
fn resume_after(from_query: Option<i64>, last_event_id: Option<&HeaderValue>) -> i64 {
    let from_header = last_event_id
        .and_then(|value| value.to_str().ok())
        .and_then(|text| text.trim().parse::<i64>().ok());
    from_query.max(from_header).unwrap_or(0)
}

/// State of one execution stream.
struct Tail {
    kernel: Kernel,
    id: ExecutionId,
    /// Sequence of the last event sent (or `after_sequence`).
    cursor: i64,
    /// Most bytes of payloads one read loads (`--max-page-bytes`; at least one event).
    read_bytes: i64,
    /// Events read but not sent yet.
    buffer: VecDeque<Event>,
    /// Whether the store may hold events after `cursor` that are not in `buffer`.
    need_read: bool,
    /// Set once a terminal event was sent.
    done: bool,
    notices: broadcast::Receiver<CommitNotice>,
    common: Common,
    /// Cluster mode: resolves when the execution's partition leaves this kernel.
    fence: Option<crate::cluster::handover::StreamFence>,
}

/// Resolves when the partition of a cluster-mode stream is lost; never otherwise.
async fn partition_lost(fence: &mut Option<crate::cluster::handover::StreamFence>) {
    match fence {
        Some(fence) => fence.lost().await,
        None => std::future::pending().await,
    }
}

impl Tail {
    /// Returns the next chunk to send, or `None` to end the response.
    async fn next_chunk(&mut self) -> Option<Bytes> {
        if let Some(preamble) = self.common.preamble() {
            return Some(preamble);
        }
        loop {
            if self.done || self.common.shutdown.is_cancelled() {
                return None;
            }
            if self.fence.as_ref().is_some_and(|fence| !fence.holds()) {
                return self.moved();
            }
            if let Some(event) = self.buffer.pop_front() {
                return Some(self.send(&event));
            }
            if self.need_read {
                self.need_read = false;
                if self.read_page().await? {
                    continue;
                }
            }
            tokio::select! {
                biased;
                () = self.common.shutdown.cancelled() => return None,
                () = partition_lost(&mut self.fence) => return self.moved(),
                notice = self.notices.recv() => match notice {
                    // Any commit of this execution means a read, even one at or below the
                    // cursor: when `after_sequence` is past the end, the empty read then sees
                    // a terminal status and ends the stream.
                    Ok(notice) => self.need_read |= notice.execution_id == self.id,
                    // Lagging behind the broadcast only means we must look at the store again.
                    Err(broadcast::error::RecvError::Lagged(_)) => self.need_read = true,
                    Err(broadcast::error::RecvError::Closed) => return None,
                },
                _ = self.common.heartbeat.tick() => return Some(Bytes::from_static(HEARTBEAT)),
            }
        }
    }

    /// Reads the next page into the buffer. Returns `Some(true)` when it found events, and
    /// `None` when the stream must end (store failure, or terminal with nothing left).
    async fn read_page(&mut self) -> Option<bool> {
        let page = read_after(&self.kernel, &self.id, self.cursor, self.read_bytes).await?;
        // A page that stopped at its count or its bytes may have more behind it; a short one
        // is everything committed so far, and later commits arrive as notices.
        self.need_read = page.full;
        let found = !page.items.is_empty();
        self.buffer.extend(page.items);
        Some(found)
    }

    /// Ends a cluster-mode stream whose execution this kernel no longer owns: the client's
    /// reconnect (with `Last-Event-ID`) reaches the new owner.
    fn moved(&self) -> Option<Bytes> {
        tracing::info!(execution.id = %self.id, "execution stream ended: its partition moved to another kernel");
        None
    }

    fn send(&mut self, event: &Event) -> Bytes {
        self.cursor = event.sequence;
        let type_name = event.body.type_name();
        if is_terminal_type(type_name) {
            self.done = true;
        }
        json_frame(Some(event.sequence), type_name, event)
    }
}

/// What the execution stream reads: the log after a sequence, and whether the execution ended.
trait ExecutionLog {
    async fn events_after(
        &self,
        id: &ExecutionId,
        after: i64,
        max_bytes: i64,
    ) -> Result<Batch<Event>, KernelError>;
    async fn has_ended(&self, id: &ExecutionId) -> Result<bool, KernelError>;
}

impl ExecutionLog for Kernel {
    async fn events_after(
        &self,
        id: &ExecutionId,
        after: i64,
        max_bytes: i64,
    ) -> Result<Batch<Event>, KernelError> {
        self.events_within(id, after, PAGE, max_bytes).await
    }

    async fn has_ended(&self, id: &ExecutionId) -> Result<bool, KernelError> {
        Ok(self.execution(id).await?.status.is_terminal())
    }
}

/// Reads the events after `cursor` (at most about `max_bytes` of them): `Some(empty)` when
/// there are none yet, `None` when the stream must end (the execution ended and everything was
/// sent, or the store failed).
async fn read_after(
    log: &impl ExecutionLog,
    id: &ExecutionId,
    cursor: i64,
    max_bytes: i64,
) -> Option<Batch<Event>> {
    let logged = |error: KernelError| {
        tracing::warn!(execution.id = %id, error = %error, "execution stream read failed");
    };
    let page = log
        .events_after(id, cursor, max_bytes)
        .await
        .map_err(logged)
        .ok()?;
    if !page.items.is_empty() {
        return Some(page);
    }
    if !log.has_ended(id).await.map_err(logged).ok()? {
        return Some(page);
    }
    // Ended, but the terminal commit may have landed between the two reads (the reads may
    // even use different connections): whatever it recorded must still be sent.
    let late = log
        .events_after(id, cursor, max_bytes)
        .await
        .map_err(logged)
        .ok()?;
    (!late.items.is_empty()).then_some(late)
}

#[cfg(test)]
#[path = "sse_tests.rs"]
mod tests;
