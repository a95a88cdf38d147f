//! The HTTP/1.1 server loop: hyper's connection builder with read deadlines that axum::serve
//! does not offer, and a graceful shutdown.
//!
//! Deadlines per connection (WIRE.md §1.3; Go uses the same shape):
//! - **first byte**: a new connection that sends nothing is closed after `first_byte` (10 s):
//!   a client cannot hold a socket by connecting alone (issue 38, item 5);
//! - **idle**: a keep-alive connection waiting for its next request is closed after
//!   `idle_timeout` (120 s by default: keep-alive connections stay usable well over the
//!   SDK's 5 s pool expiry);
//! - **header read**: once the first byte of a request arrived, the whole request head must
//!   arrive within `header_read_timeout` (10 s), or the connection is closed: a client sending
//!   headers a byte at a time cannot hold a connection;
//! - **body read**: enforced where bodies are read ([`super::body`]), `body_read_timeout`.
//!
//! No read deadline applies while a response is written, so SSE streams are never cut; but a
//! write that makes no progress for `write_stall` (30 s: the client stopped reading a stream
//! or a page) fails, which closes the connection and frees what it buffered (issue 38, item 4).
//!
//! At most `max_connections` connections are open at once; past it a new connection is closed
//! as soon as it is accepted, and a warning says so (then at most once per
//! [`REFUSAL_LOG_PERIOD`], with the count refused meanwhile).
//!
//! hyper's own header timeout starts when the connection starts waiting for a request, which
//! would also close idle keep-alive connections after 10 s. So each connection gets a [`Phase`]
//! shared by its socket wrapper ([`PhasedIo`], which notes when the first byte of a request is
//! read) and its timer ([`HeadTimer`], whose sleep hyper arms while it waits for a head): the
//! sleep ends at `armed + idle_timeout` until a byte arrives, then at
//! `first byte + header_read_timeout`.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

mod deadlines;
use deadlines::{HeadTimer, Phase, PhasedIo};

/// Read deadlines of the server's connections, and how many may be open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionTimeouts {
    /// Time allowed for a request head, from its first byte.
    pub header_read: Duration,
    /// Time a keep-alive connection may wait for the first byte of its next request.
    pub idle: Duration,
    /// Time a new connection may wait before its first byte.
    pub first_byte: Duration,
    /// Most connections open at once.
    pub max_connections: usize,
    /// Time a response write may make no progress (the client reads nothing) before the
    /// connection is closed.
    pub write_stall: Duration,
}

/// Default time a new connection may stay silent.
pub const DEFAULT_FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(10);
/// Default time a response write may make no progress.
pub const DEFAULT_WRITE_STALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Default cap of open connections.
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;
/// Shortest time between two warnings about refused connections.
pub const REFUSAL_LOG_PERIOD: Duration = Duration::from_secs(10);

/// Default time allowed for a request head (Go's `ReadHeaderTimeout`).
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Default time an idle keep-alive connection is kept (Go's `IdleTimeout`).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(120);

impl Default for ConnectionTimeouts {
    fn default() -> Self {
        Self {
            header_read: DEFAULT_HEADER_READ_TIMEOUT,
            idle: DEFAULT_IDLE_TIMEOUT,
            first_byte: DEFAULT_FIRST_BYTE_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            write_stall: DEFAULT_WRITE_STALL_TIMEOUT,
        }
    }
}

/// How long open connections stay open after the server stops accepting, each answer saying
/// `Connection: close`, before idle ones are closed.
const CLOSING: Duration = Duration::from_millis(250);

/// Serves `app` on `listener` until `shutdown` resolves, then stops accepting, retires the open
/// connections ([`CLOSING`]), lets every in-flight request finish and returns. Dropping the
/// returned future closes every connection at once.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    timeouts: ConnectionTimeouts,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let graceful = GracefulShutdown::new();
    let closing = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut connections = JoinSet::new();
    let service = TowerToHyperService::new(app);
    let slots = Arc::new(tokio::sync::Semaphore::new(timeouts.max_connections));
    let mut refusals = Refusals::default();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            Some(_) = connections.join_next() => continue,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    accept_failed(&error).await;
                    continue;
                }
            },
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            refusals.refused(peer, timeouts.max_connections);
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let phase = Arc::new(Phase::default());
        let io = TokioIo::new(PhasedIo {
            inner: stream,
            phase: phase.clone(),
            write_stall: timeouts.write_stall,
            stalled: None,
        });
        let mut builder = http1::Builder::new();
        builder
            .timer(HeadTimer { phase, timeouts })
            // Any value arms hyper's timer; the head timer computes the real deadlines.
            .header_read_timeout(timeouts.idle)
            .keep_alive(true);
        let per_connection = service.clone();
        let closing_now = closing.clone();
        // An answer given before the body was read drains it or says `Connection: close`;
        // so does every answer once the server is closing.
        let watched = hyper::service::service_fn(move |request: hyper::Request<_>| {
            let (request, settle) = super::unread_body::watch(request);
            let answer = hyper::service::Service::call(&per_connection, request);
            let closing = closing_now.clone();
            async move {
                let mut response = settle.answer(answer.await?).await;
                if closing.load(std::sync::atomic::Ordering::Relaxed) {
                    response.headers_mut().insert(
                        axum::http::header::CONNECTION,
                        axum::http::HeaderValue::from_static("close"),
                    );
                }
                Ok::<_, std::convert::Infallible>(response)
            }
        });
        let connection = graceful.watch(builder.serve_connection(io, watched));
        // The connection's requests are handled in its task, which knows the client's address
        // ([`client`]: failed-authentication limits, logs); set once per connection rather than
        // inserted into every request's extensions.
        connections.spawn(CLIENT.scope(peer, async move {
            let _slot = slot;
            if let Err(error) = connection.await {
                tracing::debug!(error = %error, "connection closed with an error");
            }
        }));
    }
    drop(listener);
    // For a moment the open connections stay open and every answer says `Connection: close`:
    // a client's pooled connection is retired after its next request instead of being closed
    // under a request the client is sending (it would see the connection drop with no answer,
    // not knowing whether the request was done). Then in-flight requests finish and idle
    // connections close.
    closing.store(true, std::sync::atomic::Ordering::Relaxed);
    tokio::select! {
        () = tokio::time::sleep(CLOSING) => {}
        () = async { while connections.join_next().await.is_some() {} } => {}
    }
    tokio::select! {
        () = graceful.shutdown() => {}
        () = async { while connections.join_next().await.is_some() {} } => {}
    }
    Ok(())
}

/// Connections refused past the cap, for the warnings about them.
#[derive(Default)]
struct Refusals {
    /// When the last warning was logged.
    logged_at: Option<Instant>,
    /// Connections refused since.
    unlogged: u64,
}

impl Refusals {
    /// Notes a connection from `peer` refused past `limit`; warns when the period allows.
    fn refused(&mut self, peer: std::net::SocketAddr, limit: usize) {
        self.unlogged += 1;
        let now = Instant::now();
        if self
            .logged_at
            .is_some_and(|at| now.duration_since(at) < REFUSAL_LOG_PERIOD)
        {
            return;
        }
        tracing::warn!(
            limit,
            client = %peer.ip(),
            refused = self.unlogged,
            "connection limit reached (--max-connections {limit}): closing new connections"
        );
        self.logged_at = Some(now);
        self.unlogged = 0;
    }
}

tokio::task_local! {
    static CLIENT: std::net::SocketAddr;
}

/// The address of the client whose request the current task handles, when the request came
/// through [`serve`].
pub fn client() -> Option<std::net::SocketAddr> {
    CLIENT.try_with(|peer| *peer).ok()
}

/// Backs off after a failed `accept` (e.g. too many open files) instead of spinning.
async fn accept_failed(error: &io::Error) {
    let transient = matches!(
        error.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionRefused
    );
    if !transient {
        tracing::warn!(error = %error, "accept failed; retrying in 100ms");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
