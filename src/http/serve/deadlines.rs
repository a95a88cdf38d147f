//! The per-connection deadline machinery described in `serve.rs`: the shared [`Phase`] of a
//! connection, its socket wrapper ([`PhasedIo`]: notes the first byte of each request head and
//! fails a stalled write) and hyper's timer for the request-head deadline ([`HeadTimer`]).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hyper::rt::{Sleep, Timer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::ConnectionTimeouts;

/// What a connection is doing, as far as its deadlines care.
#[derive(Default)]
pub(super) struct Phase {
    state: Mutex<PhaseState>,
}

#[derive(Default, Clone, Copy)]
struct PhaseState {
    /// When hyper started waiting for a request head (`None` while it is not waiting).
    armed_at: Option<Instant>,
    /// When the first byte of that head arrived.
    first_byte_at: Option<Instant>,
    /// Whether the connection ever sent a byte (until then the first-byte deadline applies).
    spoke: bool,
}

impl Phase {
    fn lock(&self) -> std::sync::MutexGuard<'_, PhaseState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn arm(&self) {
        let mut state = self.lock();
        state.armed_at = Some(Instant::now());
        state.first_byte_at = None;
    }

    fn bytes_read(&self) {
        let mut state = self.lock();
        state.spoke = true;
        if state.armed_at.is_some() && state.first_byte_at.is_none() {
            state.first_byte_at = Some(Instant::now());
        }
    }

    fn deadline(&self, timeouts: ConnectionTimeouts) -> Instant {
        let state = *self.lock();
        let waiting = if state.spoke {
            timeouts.idle
        } else {
            timeouts.first_byte.min(timeouts.idle)
        };
        match (state.first_byte_at, state.armed_at) {
            (Some(first), _) => first + timeouts.header_read,
            (None, Some(armed)) => armed + waiting,
            (None, None) => Instant::now() + waiting,
        }
    }
}

/// The socket of one connection, noting the first byte of each request head and failing a
/// write that made no progress for `write_stall`.
pub(super) struct PhasedIo {
    pub(super) inner: TcpStream,
    pub(super) phase: Arc<Phase>,
    pub(super) write_stall: Duration,
    /// Armed while writes return `Pending`; a write that completes disarms it.
    pub(super) stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl PhasedIo {
    /// Passes on a write's outcome; a `Pending` one fails once the stall deadline passed.
    fn stall_checked<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if !polled.is_pending() {
            self.stalled = None;
            return polled;
        }
        let deadline = self.write_stall;
        let sleep = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(deadline)));
        if sleep.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client read nothing within the write-stall deadline",
            )));
        }
        Poll::Pending
    }
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
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.stall_checked(cx, polled)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.stall_checked(cx, polled)
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
pub(super) struct HeadTimer {
    pub(super) phase: Arc<Phase>,
    pub(super) timeouts: ConnectionTimeouts,
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
