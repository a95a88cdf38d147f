//! `GET /v0/executions/{id}/stream` (WIRE.md §7.7): subscribes to commit notices *before*
//! reading, replays the log a bounded read at a time (`--max-page-bytes`, at least one event
//! per read), then tails it; it ends right after a terminal event, or at once when the
//! execution is terminal and nothing remains.

use std::collections::VecDeque;

use axum::body::Bytes;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue};
use axum::response::Response;
use keel_actors::events::{Event, is_terminal_type};
use keel_actors::ids::ExecutionId;
use keel_actors::kernel::{CommitNotice, Kernel, KernelError};
use keel_actors::store::Batch;
use tokio::sync::broadcast;

use super::AppState;
use super::error::ApiError;
use super::executions::path_id;
use super::query::QueryParams;
use super::sse::{Common, HEARTBEAT, StreamKind, json_frame, sse_response};

/// Events read from the store per page while replaying; a page also stops once it passes
/// `--max-page-bytes` of payloads, so a backlog of large events is loaded a bounded amount at
/// a time.
const PAGE: i64 = 1000;

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
#[path = "execution_stream_tests.rs"]
mod tests;
