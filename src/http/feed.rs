//! The kernel-wide event feed (docs/events.md): `GET /v0/events` (pages) and
//! `GET /v0/events/stream` (SSE), over every execution in position order.
//!
//! The stream runs a producer task that replays the log from the requested position and then
//! tails it ([`FeedReader`]), handing frames to the response body through a bounded channel.
//! A consumer that lets the channel stay full for longer than the cut-off (it stopped reading,
//! or reads slower than the kernel writes) is disconnected and counted in
//! `keel_slow_consumers_disconnected_total{kind="feed"}`; it reconnects with `Last-Event-ID`
//! and replays what it missed from the log, so the kernel never buffers more than the channel
//! (at most `--stream-buffer-bytes` of frames) and one page per consumer. A connection whose
//! client reads nothing at all is closed by the server's write-stall deadline (`serve.rs`).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use axum::response::Response;
use keel_actors::feed::FeedEvent;
use serde_json::json;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::time::{Instant, MissedTickBehavior};

use super::AppState;
use super::error::ApiError;
use super::query::QueryParams;
use super::sse::{ConnectionGuard, HEARTBEAT, PREAMBLE, StreamKind, json_frame, sse_response};
use crate::feed::reader::read_page;
use crate::feed::{FeedFilter, FeedReader, TypePatterns, event_json};
use keel_actors::ids::{AgentId, ExecutionId};

/// Default number of events of one page of `GET /v0/events`.
const DEFAULT_PAGE: i64 = 100;
/// Largest page of `GET /v0/events`.
const MAX_PAGE: i64 = 1000;

/// Bounds of each feed stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeedSettings {
    /// Frames buffered between the stream's reader and its connection.
    pub buffer: usize,
    /// Most bytes of frames buffered (`--stream-buffer-bytes`).
    pub buffer_bytes: usize,
    /// How long the buffer may stay full before the consumer is cut off.
    pub cutoff: Duration,
}

/// Default `--stream-buffer-bytes`.
pub const DEFAULT_BUFFER_BYTES: usize = 8 * 1024 * 1024;

impl Default for FeedSettings {
    fn default() -> Self {
        Self {
            buffer: 256,
            buffer_bytes: DEFAULT_BUFFER_BYTES,
            cutoff: Duration::from_secs(30),
        }
    }
}

/// Parses the filters shared by both routes.
fn filter(query: &QueryParams) -> Result<FeedFilter, ApiError> {
    let types = TypePatterns::parse_list(&query.all("types").join(","))
        .map_err(|error| ApiError::validation(error.to_string()))?;
    let mut labels = Vec::new();
    for label in query.all("label") {
        labels.push(super::query::label_filter(label)?);
    }
    Ok(FeedFilter {
        types,
        agent_id: query.get("agent_id").map(AgentId::from),
        execution_id: query.get("execution_id").map(ExecutionId::from),
        labels,
    })
}

/// Parses a position (`after_position`, `Last-Event-ID`): a non-negative integer.
fn position(name: &str, text: &str) -> Result<i64, ApiError> {
    match text.trim().parse::<i64>() {
        Ok(value) if value >= 0 => Ok(value),
        _ => Err(ApiError::validation(format_args!(
            "{name} must be a non-negative integer, got {text:?}"
        ))),
    }
}

/// Returns where to start: `Last-Event-ID` when the client sends one (a reconnecting
/// EventSource repeats its original URL), else `after_position`, else 0.
fn start_position(query: &QueryParams, headers: &HeaderMap) -> Result<i64, ApiError> {
    if let Some(value) = headers.get("last-event-id") {
        let text = value
            .to_str()
            .map_err(|_| ApiError::validation("Last-Event-ID must be text"))?;
        if !text.trim().is_empty() {
            return position("Last-Event-ID", text);
        }
    }
    query
        .get("after_position")
        .map_or(Ok(0), |text| position("after_position", text))
}

/// `GET /v0/events?after_position=&limit=&types=&agent_id=&execution_id=&label=`: one page.
/// `next_after_position` is where the next page starts (it moves past events the type patterns
/// skipped, so a page can be empty and still have `has_more`).
pub async fn page(
    State(state): State<AppState>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let query = QueryParams::parse(raw.as_deref(), &["label", "types"])?;
    let filter = filter(&query)?;
    let after = start_position(&query, &headers)?;
    let limit = match query.get("limit") {
        None => DEFAULT_PAGE,
        Some(text) => match text.parse::<i64>() {
            Ok(value) if value > 0 => value.min(MAX_PAGE),
            _ => {
                return Err(ApiError::validation(format_args!(
                    "limit must be a positive integer, got {text:?}"
                )));
            }
        },
    };
    let page = read_page(
        &state.kernel,
        &filter,
        after,
        limit,
        state.settings.max_page_bytes,
    )
    .await?;
    // At most `--max-page-bytes` of events: a page cut short continues after its last event.
    let mut array = super::page_bytes::CappedArray::new(state.settings.max_page_bytes);
    let (mut next, mut more) = (page.scanned_to, page.full);
    let mut last = after;
    for event in &page.events {
        if !array.push(&event_json(event))? {
            (next, more) = (last, true);
            break;
        }
        last = event.position;
    }
    array.respond(
        "events",
        &json!({ "next_after_position": next, "has_more": more }),
    )
}

/// `GET /v0/events/stream`: the live feed (same filters; `Last-Event-ID` or `after_position`).
pub async fn stream(
    State(state): State<AppState>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let query = QueryParams::parse(raw.as_deref(), &["label", "types"])?;
    let filter = filter(&query)?;
    let after = start_position(&query, &headers)?;
    // Subscribes to commits before anything is read.
    let reader = FeedReader::new(&state.kernel, filter, after, state.settings.max_page_bytes);
    let settings = state.settings.feed;
    let (sender, receiver) = mpsc::channel::<Buffered>(settings.buffer.max(1));
    let budget_bytes = settings.buffer_bytes.clamp(1, u32::MAX as usize);
    let producer = Producer {
        reader,
        sender,
        budget: Arc::new(Semaphore::new(budget_bytes)),
        budget_bytes,
        cutoff: settings.cutoff,
        heartbeat: state.settings.heartbeat,
        shutdown: state.shutdown.clone(),
        _guard: ConnectionGuard::new(&state.kernel, StreamKind::Feed),
        state: state.clone(),
    };
    tokio::spawn(producer.run());
    // A frame's share of the byte budget is returned once the connection took it.
    Ok(sse_response(futures::stream::unfold(
        receiver,
        |mut receiver| async move {
            receiver
                .recv()
                .await
                .map(|(chunk, _share)| (Ok(chunk), receiver))
        },
    )))
}

/// Why a producer stops.
enum Stop {
    /// The client went away, the server shuts down, or the kernel stopped.
    Gone,
    /// The consumer did not keep up.
    Slow,
}

/// A frame on its way to the connection, with its share of the byte budget.
type Buffered = (Bytes, Option<OwnedSemaphorePermit>);

/// The task behind one feed stream.
struct Producer {
    reader: FeedReader,
    sender: mpsc::Sender<Buffered>,
    /// Bytes of frames the connection may hold (`--stream-buffer-bytes`).
    budget: Arc<Semaphore>,
    budget_bytes: usize,
    cutoff: Duration,
    heartbeat: Duration,
    shutdown: tokio_util::sync::CancellationToken,
    _guard: ConnectionGuard,
    state: AppState,
}

impl Producer {
    async fn run(mut self) {
        let outcome = self.serve().await;
        if let Stop::Slow = outcome {
            self.state
                .kernel
                .metrics()
                .slow_consumers
                .get_or_create(&keel_actors::metrics::KindLabel {
                    kind: "feed".to_owned(),
                })
                .inc();
            tracing::info!(
                feed.position = self.reader.cursor(),
                "feed consumer cut off: it did not keep up"
            );
        }
    }

    async fn serve(&mut self) -> Stop {
        if self
            .sender
            .send((Bytes::from_static(PREAMBLE), None))
            .await
            .is_err()
        {
            return Stop::Gone;
        }
        let mut heartbeat =
            tokio::time::interval_at(Instant::now() + self.heartbeat, self.heartbeat);
        heartbeat.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            if self.shutdown.is_cancelled() {
                return Stop::Gone;
            }
            if self.reader.needs_read() {
                let events = match self.reader.read().await {
                    Ok(events) => events,
                    Err(error) => {
                        tracing::warn!(error = %error, "feed stream read failed");
                        return Stop::Gone;
                    }
                };
                for event in &events {
                    if let Err(stop) = self.send(event).await {
                        return stop;
                    }
                }
                continue;
            }
            tokio::select! {
                biased;
                () = self.shutdown.cancelled() => return Stop::Gone,
                () = self.sender.closed() => return Stop::Gone,
                changed = self.reader.changed() => if !changed { return Stop::Gone },
                _ = heartbeat.tick() => {
                    // A full buffer already tells the consumer the stream is alive.
                    if let Err(mpsc::error::TrySendError::Closed(_)) =
                        self.sender.try_send((Bytes::from_static(HEARTBEAT), None))
                    {
                        return Stop::Gone;
                    }
                }
            }
        }
    }

    /// Hands one event to the connection, waiting at most the cut-off for buffer space (a
    /// frame slot and its bytes).
    async fn send(&self, event: &FeedEvent) -> Result<(), Stop> {
        let data = event_json(event);
        let chunk = json_frame(Some(event.position), event.event.body.type_name(), &data);
        // A frame larger than the whole budget takes all of it.
        let share = u32::try_from(chunk.len().min(self.budget_bytes)).unwrap_or(u32::MAX);
        let handed = async {
            let permit = self
                .budget
                .clone()
                .acquire_many_owned(share)
                .await
                .map_err(|_| Stop::Gone)?;
            self.sender
                .send((chunk, Some(permit)))
                .await
                .map_err(|_| Stop::Gone)
        };
        tokio::select! {
            biased;
            () = self.shutdown.cancelled() => Err(Stop::Gone),
            sent = tokio::time::timeout(self.cutoff, handed) => match sent {
                Ok(outcome) => outcome,
                Err(_) => Err(Stop::Slow),
            },
        }
    }
}
