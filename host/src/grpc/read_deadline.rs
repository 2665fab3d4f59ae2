//! A request body whose every message must arrive within the body read timeout, as a REST
//! body must: a unary call's whole body from its start, a client stream's each message
//! from its first byte. Past the deadline the body fails with `DEADLINE_EXCEEDED`, which
//! ends the call and frees what it buffered; a client that sends all but one byte of a
//! message holds it no longer than that.
//!
//! Messages are followed on the gRPC framing (a 5-byte prefix, the length in its last
//! four) as the bytes pass; nothing is copied, and no timer exists until the client makes
//! the server wait in the middle of a message.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use tokio::time::{Instant, Sleep};
use tonic::body::Body;
use tonic::Status;

use super::bounds::EdgeBounds;
use super::reflection_check::ReflectionCheck;
use super::status::{edge_status, EdgeError};

/// Where the body is in the gRPC framing.
#[derive(Default)]
struct Framing {
    /// Bytes of the current message's 5-byte prefix seen (0: between messages).
    prefix_seen: u8,
    /// The length being read from the prefix.
    len: u32,
    /// Bytes of the current message's payload still to come.
    remaining: u64,
    /// Messages whose last byte has arrived.
    completed: u64,
}

impl Framing {
    fn advance(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            if self.prefix_seen < 5 {
                if self.prefix_seen > 0 {
                    self.len = (self.len << 8) | u32::from(data[0]);
                }
                data = &data[1..];
                self.prefix_seen += 1;
                if self.prefix_seen == 5 {
                    self.remaining = u64::from(self.len);
                    if self.remaining == 0 {
                        self.message_done();
                    }
                }
            } else {
                let take = usize::try_from(self.remaining).unwrap_or(usize::MAX).min(data.len());
                data = &data[take..];
                self.remaining -= take as u64;
                if self.remaining == 0 {
                    self.message_done();
                }
            }
        }
    }

    fn message_done(&mut self) {
        self.prefix_seen = 0;
        self.len = 0;
        self.completed += 1;
    }

    fn in_message(&self) -> bool {
        self.prefix_seen > 0
    }
}

/// See the module's documentation.
pub struct ReadDeadline {
    inner: Body,
    framing: Framing,
    /// Client streaming: deadlines per message; otherwise one for the whole body.
    streaming: bool,
    /// When the message being read (or the whole unary body) must have arrived.
    deadline: Option<Instant>,
    /// The timer, made the first time the deadline has to be waited for.
    timer: Option<(Instant, Pin<Box<Sleep>>)>,
    bounds: Arc<EdgeBounds>,
    failed: bool,
    /// A reflection call's check of its messages.
    check: Option<ReflectionCheck>,
}

impl ReadDeadline {
    pub fn new(inner: Body, streaming: bool, bounds: Arc<EdgeBounds>, check: Option<ReflectionCheck>) -> Self {
        let deadline = (!streaming).then(|| Instant::now() + bounds.message_read_timeout);
        Self {
            inner,
            framing: Framing::default(),
            streaming,
            deadline,
            timer: None,
            bounds,
            failed: false,
            check,
        }
    }

    fn track(&mut self, data: &[u8]) {
        if !self.streaming || data.is_empty() {
            return;
        }
        let (was_in, before) = (self.framing.in_message(), self.framing.completed);
        self.framing.advance(data);
        self.deadline = if !self.framing.in_message() {
            None
        } else if was_in && self.framing.completed == before {
            self.deadline
        } else {
            // A message began in this frame.
            Some(Instant::now() + self.bounds.message_read_timeout)
        };
    }

    /// Whether the deadline has passed (registering for a wake-up when it will).
    fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(deadline) = self.deadline else {
            return false;
        };
        if self.timer.as_ref().is_none_or(|(at, _)| *at != deadline) {
            self.timer = Some((deadline, Box::pin(tokio::time::sleep_until(deadline))));
        }
        self.timer
            .as_mut()
            .is_some_and(|(_, timer)| timer.as_mut().poll(cx).is_ready())
    }
}

impl HttpBody for ReadDeadline {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        if self.failed {
            return Poll::Ready(None);
        }
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    self.track(data);
                    if let Some(check) = &mut self.check {
                        check.feed(data);
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(None) => {
                if let Some(check) = &self.check {
                    check.end();
                }
                Poll::Ready(None)
            }
            Poll::Ready(other) => Poll::Ready(other),
            Poll::Pending if self.expired(cx) => {
                self.failed = true;
                self.timer = None;
                if let Some(metrics) = &self.bounds.metrics {
                    metrics.count_timed_out("message_read");
                }
                let limit_ms = self.bounds.message_read_timeout.as_millis();
                Poll::Ready(Some(Err(edge_status(&EdgeError::MessageReadTimeout { limit_ms }))))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.failed || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_framing_is_followed_across_any_split() {
        let mut stream = Vec::new();
        for len in [0u32, 1, 300, 70_000] {
            stream.push(0);
            stream.extend_from_slice(&len.to_be_bytes());
            stream.extend(std::iter::repeat_n(7u8, len as usize));
        }
        for piece in [1, 2, 3, 5, 7, 4096, stream.len()] {
            let mut framing = Framing::default();
            for chunk in stream.chunks(piece) {
                framing.advance(chunk);
            }
            assert_eq!(framing.completed, 4, "pieces of {piece}");
            assert!(!framing.in_message());
        }
        let mut framing = Framing::default();
        framing.advance(&stream[..stream.len() - 1]);
        assert!(framing.in_message());
        assert_eq!(framing.completed, 3);
    }
}
