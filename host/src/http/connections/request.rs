//! A connection's requests on their way to the router: the body read deadline on every
//! request body (408 when it passes), and requests counted in flight for the watchdog.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderValue, Request, Response, StatusCode};
use axum::{BoxError, Router};
use bytes::Bytes;
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper::service::Service;
use hyper_util::service::TowerToHyperService;
use tokio::time::{Instant, Sleep};

use super::stats::{ConnectionStats, Timeout};
use super::watchdog::Activity;

/// Hands a connection's requests to the router: puts the body read deadline on each
/// request body and keeps the connection's [`Activity`] informed of requests in flight.
pub(super) struct RequestService {
    pub(super) router: TowerToHyperService<Router>,
    pub(super) activity: Arc<Activity>,
    pub(super) stats: Arc<ConnectionStats>,
    pub(super) body_read_timeout: Duration,
    pub(super) peer: SocketAddr,
}

impl Service<Request<Incoming>> for RequestService {
    type Response = Response<TrackedBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let in_flight = InFlight::start(self.activity.clone());
        let mut expired = None;
        let request = request.map(|body| {
            if body.is_end_stream() {
                Body::new(body)
            } else {
                let flag = Arc::new(AtomicBool::new(false));
                expired = Some(flag.clone());
                Body::new(DeadlineBody::new(body, self.body_read_timeout, flag))
            }
        });
        let answer = self.router.call(request);
        let (stats, peer) = (self.stats.clone(), self.peer);
        Box::pin(async move {
            let response = match answer.await {
                Ok(response) => response,
                Err(never) => match never {},
            };
            // Whatever the handler made of the failed body read, the client hears why.
            let response = if expired.is_some_and(|flag| flag.load(Ordering::Acquire)) {
                stats.count_timeout(Timeout::BodyRead);
                tracing::debug!(%peer, "request body not received within the body read timeout; answering 408");
                body_timeout_response()
            } else {
                response
            };
            Ok(response.map(|body| TrackedBody {
                body,
                _in_flight: in_flight,
            }))
        })
    }
}

/// 408 with `Connection: close`: the rest of the body may still be on its way, so the
/// connection cannot carry another request.
pub(super) fn body_timeout_response() -> Response<Body> {
    let mut response = crate::http::response::error(
        StatusCode::REQUEST_TIMEOUT,
        "the request body did not arrive within the body read timeout",
    );
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// A request counted in flight from its headers' arrival until its response is sent.
pub(super) struct InFlight(Arc<Activity>);

impl InFlight {
    pub(super) fn start(activity: Arc<Activity>) -> Self {
        activity.request_started();
        Self(activity)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.request_finished();
    }
}

/// A response body that keeps its request in flight until hyper has taken all of it
/// (hyper drops the body then, or when the connection ends).
pub(super) struct TrackedBody {
    body: Body,
    _in_flight: InFlight,
}

impl HttpBody for TrackedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The body read timeout passed before the whole request body arrived.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within the body read timeout")]
pub(super) struct BodyReadTimeout;

/// A request body that fails with [`BodyReadTimeout`] once its deadline passes before
/// its end, and flags that it did.
pub(super) struct DeadlineBody {
    inner: Incoming,
    deadline: Instant,
    /// Wakes the reader at the deadline while it waits for bytes.
    timer: Pin<Box<Sleep>>,
    expired: Arc<AtomicBool>,
    ended: bool,
}

impl DeadlineBody {
    pub(super) fn new(inner: Incoming, timeout: Duration, expired: Arc<AtomicBool>) -> Self {
        let now = Instant::now();
        // The flag's range keeps this from overflowing; if it did, the body gets a year.
        let deadline = now
            .checked_add(timeout)
            .unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 3600));
        Self {
            inner,
            deadline,
            timer: Box::pin(tokio::time::sleep_until(deadline)),
            expired,
            ended: false,
        }
    }

    pub(super) fn expire(&mut self) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.expired.store(true, Ordering::Release);
        Poll::Ready(Some(Err(Box::new(BodyReadTimeout))))
    }
}

impl HttpBody for DeadlineBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if this.ended {
            return Pin::new(&mut this.inner).poll_frame(cx).map_err(Into::into);
        }
        // Checked before reading too: a steady dribble must not outlast the deadline.
        if this.expired.load(Ordering::Relaxed) || Instant::now() >= this.deadline {
            return this.expire();
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                this.ended = frame.is_none() || this.inner.is_end_stream();
                Poll::Ready(frame.map(|f| f.map_err(Into::into)))
            }
            Poll::Pending => {
                if this.timer.as_mut().poll(cx).is_ready() {
                    return this.expire();
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
