//! Wake-ups between the kernels of a cluster over PostgreSQL `LISTEN/NOTIFY` (issue 32 design
//! point 6; docs/architecture.md, "Cluster"). Two channels:
//! - `keel_commits`: sent after a commit of events, never inside the transaction that wrote
//!   them (a NOTIFY takes a database-wide lock at commit). Commits made while one is on its
//!   way are coalesced into the next one. A kernel receiving one wakes its feed readers (the
//!   `/v0/events` streams and webhook delivery) at once instead of at their next poll.
//! - `keel_cluster`: sent when a kernel joins, leaves or releases partitions; the others run
//!   their lease manager's tick at once, so a hand-over does not wait up to a tick.
//!
//! Notifications only shorten waits: every reader still polls (the feed every second, the
//! lease manager every tick), and with `--no-notify` polling is the only path. A lost
//! notification, or a listening connection that drops, delays a wake-up; it loses nothing.

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::PgListener;
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::store::postgres::Membership;

/// Channel of commit wake-ups.
pub const COMMITS: &str = "keel_commits";

/// Channel of membership changes.
pub const MEMBERSHIP: &str = "keel_cluster";

/// Shortest time between two commit notifications of one kernel.
pub const PACE: Duration = Duration::from_millis(5);

/// Wait before listening again after the listening connection failed.
const RECONNECT: Duration = Duration::from_secs(1);

/// Bound of connecting the listening connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The wake-up state a kernel shares between its store, its feed readers and its lease
/// manager. Inert until [`Wakeups::start`] (and always with `--no-notify`).
#[derive(Debug)]
pub struct Wakeups {
    /// Counts this kernel's commits; the notifier sends one NOTIFY per change it sees.
    committed: watch::Sender<u64>,
    /// Counts the commit notifications received; feed readers watch it.
    remote: watch::Sender<u64>,
    /// Woken by a membership notification.
    membership: Arc<Notify>,
    /// Whether notifications are on (the feed's safety-net poll is longer then).
    enabled: std::sync::atomic::AtomicBool,
}

impl Default for Wakeups {
    fn default() -> Self {
        Self {
            committed: watch::Sender::new(0),
            remote: watch::Sender::new(0),
            membership: Arc::new(Notify::new()),
            enabled: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

impl Wakeups {
    /// Records that this kernel committed events (cheap: no statement here).
    pub fn committed(&self) {
        if self.enabled() {
            self.committed
                .send_modify(|count| *count = count.wrapping_add(1));
        }
    }

    /// Whether the LISTEN/NOTIFY tasks run.
    pub fn enabled(&self) -> bool {
        self.enabled.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A receiver that changes when another kernel (or this one) committed, or when
    /// notifications may have been missed; `None` with notifications off.
    pub fn remote_commits(&self) -> Option<watch::Receiver<u64>> {
        self.enabled().then(|| self.remote.subscribe())
    }

    /// Woken when a kernel joins, leaves or releases partitions.
    pub fn membership(&self) -> Arc<Notify> {
        self.membership.clone()
    }

    fn wake_readers(&self) {
        self.remote
            .send_modify(|count| *count = count.wrapping_add(1));
    }

    /// Starts the notifier (on `membership`'s connections) and the listener (its own
    /// connection to `db_url`), until `stop`.
    pub fn start(
        self: &Arc<Self>,
        db_url: &str,
        membership: Arc<Membership>,
        node_id: &str,
        stop: &CancellationToken,
    ) {
        self.enabled
            .store(true, std::sync::atomic::Ordering::Relaxed);
        tokio::spawn(notifier(
            self.committed.subscribe(),
            membership,
            stop.clone(),
        ));
        tokio::spawn(listener(
            self.clone(),
            db_url.to_owned(),
            node_id.to_owned(),
            stop.clone(),
        ));
    }
}

/// Sends one `keel_commits` NOTIFY per change of `committed`, at most one per [`PACE`]: the
/// commits made while one is on its way, or within the pace after it, collapse into the next.
/// (One per group commit doubled the transactions of a loaded kernel, each NOTIFY taking
/// PostgreSQL's notification lock at its commit.)
async fn notifier(
    mut committed: watch::Receiver<u64>,
    membership: Arc<Membership>,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            changed = committed.changed() => if changed.is_err() { return },
        }
        committed.borrow_and_update();
        // A failure only delays the others' readers until their poll.
        let _ = membership.notify(COMMITS).await;
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(PACE) => {}
        }
    }
}

/// Listens on both channels, reconnecting after a failure; wakes the readers whenever a
/// notification may have been missed.
async fn listener(wakeups: Arc<Wakeups>, db_url: String, node_id: String, stop: CancellationToken) {
    let mut failing = false;
    loop {
        let connected = tokio::select! {
            () = stop.cancelled() => return,
            connected = connect(&db_url) => connected,
        };
        match connected {
            Ok(mut listener) => {
                if failing {
                    info!(node = %node_id, "listening for cluster notifications again");
                    failing = false;
                }
                // Anything sent while not listening is found by reading now.
                wakeups.wake_readers();
                wakeups.membership.notify_one();
                loop {
                    let received = tokio::select! {
                        () = stop.cancelled() => return,
                        received = listener.try_recv() => received,
                    };
                    match received {
                        Ok(Some(notification)) if notification.channel() == MEMBERSHIP => {
                            wakeups.membership.notify_one();
                        }
                        Ok(Some(_)) => wakeups.wake_readers(),
                        // The connection dropped (sqlx reconnects on the next call):
                        // notifications may have been missed.
                        Ok(None) => wakeups.wake_readers(),
                        Err(error) => {
                            if !failing {
                                warn!(node = %node_id, error = %error, "cluster notifications lost; polling until they are back");
                                failing = true;
                            }
                            break;
                        }
                    }
                }
            }
            Err(error) => {
                if !failing {
                    warn!(node = %node_id, error = %error, "cannot listen for cluster notifications; polling until it can");
                    failing = true;
                }
            }
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(RECONNECT) => {}
        }
    }
}

async fn connect(db_url: &str) -> Result<PgListener, String> {
    let connecting = async {
        let mut listener = PgListener::connect(db_url).await?;
        listener.listen_all([COMMITS, MEMBERSHIP]).await?;
        Ok::<_, sqlx::Error>(listener)
    };
    match tokio::time::timeout(CONNECT_TIMEOUT, connecting).await {
        Ok(Ok(listener)) => Ok(listener),
        Ok(Err(error)) => Err(error.to_string()),
        Err(_) => Err(format!(
            "no connection within {} ms",
            CONNECT_TIMEOUT.as_millis()
        )),
    }
}
