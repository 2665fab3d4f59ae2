//! An answer body that hands HTTP/2 its data in small pieces, so that an answer its client
//! does not read stays in one place the server can drop, and is dropped once left unread
//! for the idle timeout (REST drops an unread answer after the same time).
//!
//! tonic hands over an encoded answer as one piece, and h2 queues whatever it is given
//! until the client's flow-control window lets it out: a 60 MiB answer to a client that
//! never reads would stay queued for as long as the connection lives (its pings keep it
//! up). Here a piece above [`PIECE`] is held back and given out [`PIECE`] bytes at a time
//! (copies, so the pieces h2 holds never pin the whole answer); hyper asks for the next
//! piece only once h2 has room, i.e. once the client reads. A watchdog, started with the
//! first large answer of a call, drops what is held when the client has taken nothing
//! for the idle timeout (h2 keeps at most its send window of it); should the client read
//! again, the call ends `DEADLINE_EXCEEDED`.
//!
//! It also rewrites a client's-fault `INTERNAL` in the answer's trailers
//! ([`super::bounds::rewrite_client_fault`]).

use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use tokio::sync::oneshot;
use tokio::time::Instant;
use tonic::body::Body;
use tonic::Status;

use super::bounds::{refuse_malformed, rewrite_client_fault, EdgeBounds};
use super::status::{edge_status, EdgeError};
use crate::sync::lock;

/// Bytes given to h2 at a time; a smaller data frame passes as it is.
pub const PIECE: usize = 64 * 1024;

/// What a large answer has not yet given out.
struct Held {
    rest: Bytes,
    /// When the client last took a piece.
    progress: Instant,
    /// The watchdog dropped the rest.
    dropped: bool,
}

/// See the module's documentation.
pub struct Paced {
    inner: Body,
    held: Option<Arc<Mutex<Held>>>,
    /// Dropped with the body, which ends the watchdog at once.
    _alive: Option<oneshot::Sender<()>>,
    bounds: Arc<EdgeBounds>,
    done: bool,
    /// Set when a reflection call's request was malformed ([`super::reflection_check`]).
    malformed_request: Option<Arc<AtomicU8>>,
}

impl Paced {
    pub fn new(inner: Body, bounds: Arc<EdgeBounds>, malformed_request: Option<Arc<AtomicU8>>) -> Self {
        Self {
            malformed_request,
            inner,
            held: None,
            _alive: None,
            bounds,
            done: false,
        }
    }

    /// Keeps `rest` to be given out piece by piece, watched by the watchdog.
    fn hold(&mut self, rest: Bytes) {
        if let Some(held) = &self.held {
            let mut held = lock(held);
            held.rest = rest;
            held.progress = Instant::now();
            return;
        }
        let held = Arc::new(Mutex::new(Held {
            rest,
            progress: Instant::now(),
            dropped: false,
        }));
        let (alive, gone) = oneshot::channel();
        tokio::spawn(watchdog(Arc::downgrade(&held), self.bounds.clone(), gone));
        self.held = Some(held);
        self._alive = Some(alive);
    }
}

/// A copy of the first [`PIECE`] bytes of `data`, which advances past them.
fn piece(data: &mut Bytes) -> Bytes {
    let n = data.len().min(PIECE);
    let piece = Bytes::copy_from_slice(&data[..n]);
    data.advance(n);
    piece
}

/// Drops what `held` keeps once the client has taken nothing for the idle timeout; ends
/// with the answer's body (`gone`).
async fn watchdog(held: Weak<Mutex<Held>>, bounds: Arc<EdgeBounds>, mut gone: oneshot::Receiver<()>) {
    let timeout = bounds.answer_unread_timeout;
    loop {
        let wake_at = {
            let Some(held) = held.upgrade() else { return };
            let held = lock(&held);
            if held.rest.is_empty() {
                Instant::now() + timeout
            } else {
                held.progress + timeout
            }
        };
        tokio::select! {
            () = tokio::time::sleep_until(wake_at) => {}
            _ = &mut gone => return,
        }
        let Some(held) = held.upgrade() else { return };
        let mut held = lock(&held);
        if !held.rest.is_empty() && held.progress.elapsed() >= timeout {
            held.rest = Bytes::new();
            held.dropped = true;
            if let Some(metrics) = &bounds.metrics {
                metrics.count_timed_out("answer_unread");
            }
            return;
        }
    }
}

impl HttpBody for Paced {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        if self.done {
            return Poll::Ready(None);
        }
        if let Some(held) = self.held.clone() {
            let mut held = lock(&held);
            if held.dropped {
                drop(held);
                self.done = true;
                let limit_ms = self.bounds.answer_unread_timeout.as_millis();
                return Poll::Ready(Some(Err(edge_status(&EdgeError::AnswerUnread { limit_ms }))));
            }
            if !held.rest.is_empty() {
                held.progress = Instant::now();
                return Poll::Ready(Some(Ok(Frame::data(piece(&mut held.rest)))));
            }
        }
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                Ok(mut data) if data.len() > PIECE => {
                    let first = piece(&mut data);
                    self.hold(data);
                    Poll::Ready(Some(Ok(Frame::data(first))))
                }
                Ok(data) => Poll::Ready(Some(Ok(Frame::data(data)))),
                Err(mut frame) => {
                    if let Some(trailers) = frame.trailers_mut() {
                        if let Some(found) = &self.malformed_request {
                            refuse_malformed(trailers, found.load(Ordering::Relaxed), self.bounds.metrics.as_ref());
                        }
                        rewrite_client_fault(trailers, self.bounds.metrics.as_ref());
                    }
                    Poll::Ready(Some(Ok(frame)))
                }
            },
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done || (self.inner.is_end_stream() && self.held.as_ref().is_none_or(|held| lock(held).rest.is_empty()))
    }

    fn size_hint(&self) -> SizeHint {
        // Held bytes are still to come: a hint of the inner body alone would understate.
        if self.held.is_some() {
            SizeHint::default()
        } else {
            self.inner.size_hint()
        }
    }
}
