//! The HTTP/1.1 server loop: hyper's connection builder with read deadlines that axum::serve
//! does not offer, and a graceful shutdown.
//!
//! Deadlines per connection (WIRE.md §1.3; Go uses the same shape):
//! - **idle**: a connection waiting for a request that has not sent its first byte is closed
//!   after `idle_timeout` (120 s by default: keep-alive connections stay usable well over the
//!   SDK's 5 s pool expiry);
//! - **header read**: once the first byte of a request arrived, the whole request head must
//!   arrive within `header_read_timeout` (10 s), or the connection is closed: a client sending
//!   headers a byte at a time cannot hold a connection;
//! - **body read**: enforced where bodies are read ([`super::body`]), `body_read_timeout`.
//!
//! No deadline applies while a response is written, so SSE streams are never cut.
//!
//! hyper's own header timeout starts when the connection starts waiting for a request, which
//! would also close idle keep-alive connections after 10 s. So each connection gets a [`Phase`]
//! shared by its socket wrapper ([`PhasedIo`], which notes when the first byte of a request is
//! read) and its timer ([`HeadTimer`], whose sleep hyper arms while it waits for a head): the
//! sleep ends at `armed + idle_timeout` until a byte arrives, then at
//! `first byte + header_read_timeout`.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use hyper::rt::{Sleep, Timer};
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// Read deadlines of the server's connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionTimeouts {
    /// Time allowed for a request head, from its first byte.
    pub header_read: Duration,
    /// Time a connection may wait for the first byte of a request.
    pub idle: Duration,
}

/// Default time allowed for a request head (Go's `ReadHeaderTimeout`).
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Default time an idle keep-alive connection is kept (Go's `IdleTimeout`).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(120);

impl Default for ConnectionTimeouts {
    fn default() -> Self {
        Self {
            header_read: DEFAULT_HEADER_READ_TIMEOUT,
            idle: DEFAULT_IDLE_TIMEOUT,
        }
    }
}

/// Serves `app` on `listener` until `shutdown` resolves, then stops accepting, lets every
/// connection finish its in-flight request and returns. Dropping the returned future closes
/// every connection at once.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    timeouts: ConnectionTimeouts,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
    let service = TowerToHyperService::new(app);
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
        let _ = stream.set_nodelay(true);
        let phase = Arc::new(Phase::default());
        let io = TokioIo::new(PhasedIo {
            inner: stream,
            phase: phase.clone(),
        });
        let mut builder = http1::Builder::new();
        builder
            .timer(HeadTimer { phase, timeouts })
            // Any value arms hyper's timer; the head timer computes the real deadlines.
            .header_read_timeout(timeouts.idle)
            .keep_alive(true);
        // Each request carries its client's address (failed-authentication limits, logs).
        let per_connection = service.clone();
        // An answer given before the body was read drains it or says `Connection: close`.
        let with_peer = hyper::service::service_fn(move |request: hyper::Request<_>| {
            let (mut request, settle) = super::unread_body::watch(request);
            request
                .extensions_mut()
                .insert(axum::extract::ConnectInfo(peer));
            let answer = hyper::service::Service::call(&per_connection, request);
            async move { Ok::<_, std::convert::Infallible>(settle.answer(answer.await?).await) }
        });
        let connection = graceful.watch(builder.serve_connection(io, with_peer));
        connections.spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(error = %error, "connection closed with an error");
            }
        });
    }
    drop(listener);
    // In-flight requests finish; idle connections close at once.
    tokio::select! {
        () = graceful.shutdown() => {}
        () = async { while connections.join_next().await.is_some() {} } => {}
    }
    Ok(())
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

/// What a connection is doing, as far as its deadlines care.
#[derive(Default)]
struct Phase {
    state: Mutex<PhaseState>,
}

#[derive(Default, Clone, Copy)]
struct PhaseState {
    /// When hyper started waiting for a request head (`None` while it is not waiting).
    armed_at: Option<Instant>,
    /// When the first byte of that head arrived.
    first_byte_at: Option<Instant>,
}

impl Phase {
    fn lock(&self) -> std::sync::MutexGuard<'_, PhaseState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn arm(&self) {
        *self.lock() = PhaseState {
            armed_at: Some(Instant::now()),
            first_byte_at: None,
        };
    }

    fn bytes_read(&self) {
        let mut state = self.lock();
        if state.armed_at.is_some() && state.first_byte_at.is_none() {
            state.first_byte_at = Some(Instant::now());
        }
    }

    fn deadline(&self, timeouts: ConnectionTimeouts) -> Instant {
        let state = *self.lock();
        match (state.first_byte_at, state.armed_at) {
            (Some(first), _) => first + timeouts.header_read,
            (None, Some(armed)) => armed + timeouts.idle,
            (None, None) => Instant::now() + timeouts.idle,
        }
    }
}

/// The socket of one connection, noting the first byte of each request head.
struct PhasedIo {
    inner: TcpStream,
    phase: Arc<Phase>,
}

impl AsyncRead for PhasedIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.phase.bytes_read();
        }
        polled
    }
}

impl AsyncWrite for PhasedIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// hyper's timer for one connection: hyper only uses it for the request-head deadline.
struct HeadTimer {
    phase: Arc<Phase>,
    timeouts: ConnectionTimeouts,
}

impl Timer for HeadTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn Sleep>> {
        Box::pin(PlainSleep(Box::pin(tokio::time::sleep(duration))))
    }

    fn sleep_until(&self, _deadline: Instant) -> Pin<Box<dyn Sleep>> {
        self.phase.arm();
        let deadline = self.phase.deadline(self.timeouts);
        Box::pin(HeadSleep {
            phase: self.phase.clone(),
            timeouts: self.timeouts,
            target: deadline,
            sleep: Box::pin(tokio::time::sleep_until(deadline.into())),
        })
    }
}

/// A plain sleep (not used by the HTTP/1 server today; here for completeness of the trait).
struct PlainSleep(Pin<Box<tokio::time::Sleep>>);

impl Future for PlainSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.0.as_mut().poll(cx)
    }
}

impl Sleep for PlainSleep {}

/// The request-head deadline: moves from the idle deadline to the header deadline when the
/// first byte arrives (hyper polls it every time it reads without completing the head).
struct HeadSleep {
    phase: Arc<Phase>,
    timeouts: ConnectionTimeouts,
    target: Instant,
    sleep: Pin<Box<tokio::time::Sleep>>,
}

impl Future for HeadSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let target = self.phase.deadline(self.timeouts);
        if target != self.target {
            self.target = target;
            self.sleep.as_mut().reset(target.into());
        }
        self.sleep.as_mut().poll(cx)
    }
}

impl Sleep for HeadSleep {}
