//! Answers given before the request body was read (issue 38, item 9).
//!
//! A handler or middleware may answer without reading the body: a 401, a 400 on a header, a
//! 404 on an unknown route. hyper then closes the connection unless the rest of the body is
//! already in its buffer, yet the answer it wrote may have promised keep-alive, and a pooled
//! client (httpx, the rebuno SDK's) sends its next request into a closed socket. So every
//! request body is [`Watched`]: when the answer is ready and the body was not read to its end,
//! the rest is drained — at most [`DRAIN_BYTES`] within [`DRAIN_TIME`] — and if that does not
//! finish it, the answer says `Connection: close`. An answer that already says
//! `Connection: close` (an authentication failure) drains nothing; a request that asked for
//! `Expect: 100-continue` is never made to send its unread body.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::header::{CONNECTION, EXPECT};
use axum::http::{HeaderValue, Request, Response};
use hyper::body::{Body, Frame, Incoming, SizeHint};

/// Most bytes of an unread body drained so that the connection can stay open.
pub const DRAIN_BYTES: usize = 1024 * 1024;
/// Longest wait for the rest of an unread body before the answer says `Connection: close`.
pub const DRAIN_TIME: Duration = Duration::from_secs(1);

/// A request body that notes whether it was read to its end, and hands itself back when it is
/// dropped before that.
pub struct Watched {
    body: Option<Incoming>,
    shared: Arc<Shared>,
}

/// What a [`Watched`] body and its [`Settle`] share.
#[derive(Default)]
struct Shared {
    /// The body reached its end (or had none).
    ended: AtomicBool,
    /// The body, dropped by its reader before its end.
    unread: Mutex<Option<Incoming>>,
}

/// Settles the connection after the answer to one request ([`Settle::answer`]).
pub struct Settle {
    shared: Arc<Shared>,
    expects_continue: bool,
}

/// Wraps the body of `request`; the returned [`Settle`] fixes its answer.
pub fn watch(request: Request<Incoming>) -> (Request<Watched>, Settle) {
    let expects_continue = request
        .headers()
        .get(EXPECT)
        .is_some_and(|value| value.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    let shared = Arc::new(Shared::default());
    let request = request.map(|body| {
        if body.is_end_stream() {
            shared.ended.store(true, Ordering::Release);
        }
        Watched {
            body: Some(body),
            shared: shared.clone(),
        }
    });
    (
        request,
        Settle {
            shared,
            expects_continue,
        },
    )
}

impl Settle {
    /// Returns `response`, after draining the unread rest of the request body, or with
    /// `Connection: close` when that cannot be done.
    pub async fn answer<B>(self, mut response: Response<B>) -> Response<B> {
        if self.shared.ended.load(Ordering::Acquire) {
            return response;
        }
        let unread = self
            .shared
            .unread
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        let closing = response
            .headers()
            .get_all(CONNECTION)
            .iter()
            .any(|value| value.as_bytes().eq_ignore_ascii_case(b"close"));
        if closing {
            return response;
        }
        if let Some(body) = unread
            && !self.expects_continue
            && drain(body).await
        {
            return response;
        }
        response
            .headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("close"));
        response
    }
}

/// Reads and discards `body` within the drain bounds; whether it reached its end.
async fn drain(mut body: Incoming) -> bool {
    let read = async {
        let mut seen = 0usize;
        loop {
            if body.is_end_stream() {
                return true;
            }
            match std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
                None => return true,
                Some(Err(_)) => return false,
                Some(Ok(frame)) => {
                    seen += frame.data_ref().map_or(0, Bytes::len);
                    if seen > DRAIN_BYTES {
                        return false;
                    }
                }
            }
        }
    };
    tokio::time::timeout(DRAIN_TIME, read)
        .await
        .unwrap_or(false)
}

impl Watched {
    fn end(&mut self) {
        self.shared.ended.store(true, Ordering::Release);
        self.body = None;
    }
}

impl Body for Watched {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let Some(body) = self.body.as_mut() else {
            return Poll::Ready(None);
        };
        let polled = Pin::new(&mut *body).poll_frame(cx);
        match &polled {
            Poll::Ready(None) => self.end(),
            Poll::Ready(Some(Ok(_))) if body.is_end_stream() => self.end(),
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.body
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Body::size_hint)
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        if let Some(body) = self.body.take() {
            if body.is_end_stream() {
                self.shared.ended.store(true, Ordering::Release);
            } else {
                *self
                    .shared
                    .unread
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(body);
            }
        }
    }
}
