//! The feed reader both the SSE stream and webhook deliveries use: replays the log after a
//! position, then tails it, with no gap and no duplicate.
//!
//! It subscribes to commit notices *before* its first read, so a commit between a read and the
//! wait that follows is never missed. Each read asks the store for the events after the cursor
//! (the store applies the agent, execution and label filters; the reader the type patterns) and
//! moves the cursor to the last position read, matching or not, so a filtered reader does not
//! scan the same rows twice. Positions become visible in order (see `keel_actors::feed`), so
//! nothing can appear later below the cursor. When the store says other processes write too
//! (cluster mode, `Store::feed_poll_interval`), the reader also reads again on that interval,
//! as their commits reach it as no notice.

use keel_actors::feed::{FeedEvent, FeedQuery};
use keel_actors::kernel::{CommitNotice, Kernel, KernelError};
use tokio::sync::broadcast;

use super::patterns::TypePatterns;
use keel_actors::ids::{AgentId, ExecutionId};

/// Events read from the store per read.
pub const PAGE: i64 = 500;

/// Most bytes of event payloads a reader loads per read unless told otherwise (webhooks).
pub const READ_BYTES: usize = 8 * 1024 * 1024;

/// What a feed consumer asks for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FeedFilter {
    /// Type patterns (empty: every type).
    pub types: TypePatterns,
    /// Only this agent's executions.
    pub agent_id: Option<AgentId>,
    /// Only this execution.
    pub execution_id: Option<ExecutionId>,
    /// Label pairs every matching execution carries.
    pub labels: Vec<(String, String)>,
}

impl FeedFilter {
    /// Returns the store query for one page after `after_position`: up to `limit` events and
    /// `max_bytes` of their payloads.
    pub fn query(&self, after_position: i64, limit: i64, max_bytes: usize) -> FeedQuery {
        FeedQuery {
            after_position,
            limit,
            agent_id: self.agent_id.clone(),
            execution_id: self.execution_id.clone(),
            labels: self.labels.clone(),
            max_bytes: Some(i64::try_from(max_bytes).unwrap_or(i64::MAX)),
        }
    }
}

/// One page of matching events and the position the page read up to.
#[derive(Debug)]
pub struct Page {
    /// Matching events, in position order.
    pub events: Vec<FeedEvent>,
    /// Last position read (matching or not); the next read starts after it.
    pub scanned_to: i64,
    /// Whether more may follow at once (another matching event, or an unscanned rest).
    pub full: bool,
}

/// Most store reads one page makes while its type patterns skip events: a bound on the work of
/// one request, not on what the client sees (the page then ends early with `full`).
const SCAN_CHUNKS: usize = 20;

/// Reads one page of the feed after `after_position`: up to `limit` events that match the type
/// patterns too, reading the store `limit` rows at a time (plus one to look ahead) and at most
/// about `max_bytes` of them (each read holds at least one event). `full` is true only when
/// more may follow: another match was seen, a read stopped at its byte budget, or the scan
/// bound was reached before the end of the log.
pub async fn read_page(
    kernel: &Kernel,
    filter: &FeedFilter,
    after_position: i64,
    limit: i64,
    max_bytes: usize,
) -> Result<Page, KernelError> {
    let chunk = usize::try_from(limit.max(1)).unwrap_or(usize::MAX);
    let mut events = Vec::new();
    let mut cursor = after_position;
    for _ in 0..SCAN_CHUNKS {
        let batch = kernel
            .feed(&filter.query(cursor, limit.max(1).saturating_add(1), max_bytes))
            .await?;
        // The look-ahead row, or a read cut short by its byte budget: more follows.
        let more_rows = batch.full;
        let cut_by_bytes = batch.full && batch.items.len() <= chunk;
        for row in batch.items.into_iter().take(chunk) {
            let position = row.position;
            if filter.types.matches(row.event.body.type_name()) {
                if events.len() >= chunk {
                    // A match beyond the page: the next page starts with it.
                    return Ok(Page {
                        events,
                        scanned_to: cursor,
                        full: true,
                    });
                }
                events.push(row);
            }
            cursor = position;
        }
        if !more_rows {
            return Ok(Page {
                events,
                scanned_to: cursor,
                full: false,
            });
        }
        // A page holds at most one read's worth of bytes: what it has goes out first.
        if cut_by_bytes && !events.is_empty() {
            return Ok(Page {
                events,
                scanned_to: cursor,
                full: true,
            });
        }
    }
    Ok(Page {
        events,
        scanned_to: cursor,
        full: true,
    })
}

/// A replay-then-tail reader.
pub struct FeedReader {
    kernel: Kernel,
    filter: FeedFilter,
    cursor: i64,
    notices: broadcast::Receiver<CommitNotice>,
    need_read: bool,
    /// Most bytes of payloads one read loads (at least one event).
    read_bytes: usize,
    poll: Option<std::time::Duration>,
    /// Other kernels' commits (cluster mode with notifications).
    wakeups: Option<tokio::sync::watch::Receiver<u64>>,
}

impl FeedReader {
    /// Returns a reader of the events after `after_position`, subscribed to commits already,
    /// that loads at most about `read_bytes` of events per read.
    pub fn new(
        kernel: &Kernel,
        filter: FeedFilter,
        after_position: i64,
        read_bytes: usize,
    ) -> Self {
        Self {
            read_bytes,
            notices: kernel.subscribe_commits(),
            kernel: kernel.clone(),
            filter,
            cursor: after_position.max(0),
            need_read: true,
            poll: kernel.store().feed_poll_interval(),
            wakeups: kernel.store().feed_wakeups(),
        }
    }

    /// Position up to which the log has been read.
    pub fn cursor(&self) -> i64 {
        self.cursor
    }

    /// Whether the store may hold events after the cursor.
    pub fn needs_read(&self) -> bool {
        self.need_read
    }

    /// Reads the next page when one may be there. Returns matching events (possibly none).
    pub async fn read(&mut self) -> Result<Vec<FeedEvent>, KernelError> {
        if !self.need_read {
            return Ok(Vec::new());
        }
        let page = read_page(
            &self.kernel,
            &self.filter,
            self.cursor,
            PAGE,
            self.read_bytes,
        )
        .await?;
        self.cursor = page.scanned_to;
        // A full page may have more behind it; a short one is everything committed so far,
        // and later commits arrive as notices.
        self.need_read = page.full;
        Ok(page.events)
    }

    /// Waits until a commit that may concern this reader happens. Returns `false` when the
    /// kernel stopped publishing. Cancel-safe.
    pub async fn changed(&mut self) -> bool {
        loop {
            let (notices, poll, wakeups) = (&mut self.notices, self.poll, &mut self.wakeups);
            let local = async {
                match poll {
                    Some(interval) => tokio::time::timeout(interval, notices.recv()).await.ok(),
                    None => Some(notices.recv().await),
                }
            };
            let remote = async {
                if let Some(wakeups) = wakeups.as_mut()
                    && wakeups.changed().await.is_ok()
                {
                    return;
                }
                std::future::pending::<()>().await;
            };
            let received = tokio::select! {
                received = local => received,
                () = remote => None,
            };
            // The poll interval ran out, or another kernel committed.
            let Some(received) = received else {
                self.need_read = true;
                return true;
            };
            match received {
                Ok(notice) => {
                    if self.concerns(&notice) {
                        self.need_read = true;
                    }
                }
                // Lagging behind the broadcast only means the store must be read again.
                Err(broadcast::error::RecvError::Lagged(_)) => self.need_read = true,
                Err(broadcast::error::RecvError::Closed) => return false,
            }
            // Take every notice already queued, so a burst of commits costs one read.
            loop {
                match self.notices.try_recv() {
                    Ok(notice) => {
                        if self.concerns(&notice) {
                            self.need_read = true;
                        }
                    }
                    Err(broadcast::error::TryRecvError::Lagged(_)) => self.need_read = true,
                    Err(_) => break,
                }
            }
            if self.need_read {
                return true;
            }
        }
    }

    fn concerns(&self, notice: &CommitNotice) -> bool {
        self.filter
            .execution_id
            .as_ref()
            .is_none_or(|id| notice.execution_id == *id)
    }
}
