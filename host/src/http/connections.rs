//! The REST edge's connections: the accept loop and every client connection's lifetime.
//!
//! It owns what `axum::serve` left unbounded, so that no client holds a connection (and
//! its descriptor) forever and a flood of connections cannot starve the server:
//!
//! - **header read**: a request's headers must arrive within the header read timeout,
//!   counted from the connection's accept (its first request) or from the first byte of a
//!   later request; otherwise the connection is closed;
//! - **idle**: a kept-alive connection may wait the idle timeout between the end of a
//!   response and the first byte of the next request; a client that leaves its response
//!   unread (the server's writes blocked) for as long is dropped too;
//! - **body read**: a request's whole body must arrive within the body read timeout of
//!   the end of its headers; otherwise it is answered 408 and the connection closed;
//! - **count**: at most [`Limits::max_connections`] connections are served at once, a cap
//!   lowered at start so that [`DESCRIPTOR_RESERVE`] descriptors stay free for model
//!   loads and reloads. A connection beyond the cap is answered 503 at once and closed;
//!   refusals are counted (`GET /metrics`) and logged at most once per [`LOG_EVERY`].
//!
//! The header and idle timeouts are enforced by a watchdog per connection rather than by
//! hyper: hyper's `header_read_timeout` starts as soon as a connection is ready for a
//! request, so it also closes idle kept-alive connections at the header timeout (the test
//! `hyper_header_read_timeout_also_closes_idle_connections` pins this down), which would
//! make any idle timeout longer than the header timeout meaningless. hyper's timer stays
//! as a backstop at the sum of both.
//!
//! On shutdown the loop stops accepting; connections finish their in-flight request
//! (hyper's graceful shutdown) and idle ones close at once.

use std::convert::Infallible;
use std::future::Future;
use std::io::{self, Read as _, Write as _};
use std::net::{Shutdown, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderValue, Request, Response, StatusCode};
use axum::{BoxError, Router};
use bytes::Bytes;
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper::service::Service;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio::time::{Instant, Sleep};

use crate::config::ConnectionArgs;

/// Descriptors kept free of client connections: model loads and reloads (model files,
/// wasmtime's memory images), plugins' files, the repository watcher, logs, the listener.
pub const DESCRIPTOR_RESERVE: u64 = 128;

/// At most one warning of each rate-limited kind (refusals, accept errors) is logged per
/// this period.
pub const LOG_EVERY: Duration = Duration::from_secs(10);

/// Pause after an accept error such as EMFILE: the failed connection stays in the
/// backlog, so accepting again at once would fail again, in a busy loop.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// The whole answer to a connection beyond the cap.
const REFUSAL: &[u8] =
    b"HTTP/1.1 503 Service Unavailable\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";

/// The bounds every connection is held to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub header_read_timeout: Duration,
    pub body_read_timeout: Duration,
    pub idle_timeout: Duration,
    /// Connections served at once, after the descriptor reserve's clamp.
    pub max_connections: usize,
}

impl Limits {
    /// The limits the flags ask for, with the connection cap lowered to what the
    /// process's descriptor limit holds next to [`DESCRIPTOR_RESERVE`]. First raises the
    /// soft descriptor limit to the hard one (process-wide); logs the limits in force.
    pub fn establish(args: &ConnectionArgs) -> Self {
        let requested = usize::try_from(args.max_connections).unwrap_or(usize::MAX);
        let descriptors = raise_descriptor_limit();
        let limits = Self {
            header_read_timeout: args.header_read_timeout(),
            body_read_timeout: args.body_read_timeout(),
            idle_timeout: args.idle_timeout(),
            max_connections: connection_cap(requested, descriptors),
        };
        let descriptor_limit = descriptors.map_or_else(|| "unlimited".to_string(), |n| n.to_string());
        if limits.max_connections < requested {
            tracing::warn!(
                max_connections = limits.max_connections,
                requested,
                %descriptor_limit,
                reserve = DESCRIPTOR_RESERVE,
                "the descriptor limit cannot hold --max-connections plus the reserve: serving fewer connections at once"
            );
        }
        tracing::info!(
            max_connections = limits.max_connections,
            %descriptor_limit,
            header_read_timeout_ms = args.header_read_timeout_ms,
            body_read_timeout_ms = args.body_read_timeout_ms,
            idle_timeout_ms = args.idle_timeout_ms,
            "connection limits"
        );
        limits
    }
}

/// How many connections may be open at once: `requested`, but never so many that fewer
/// than [`DESCRIPTOR_RESERVE`] of `descriptor_limit` stay free (and never none).
pub fn connection_cap(requested: usize, descriptor_limit: Option<u64>) -> usize {
    let Some(limit) = descriptor_limit else {
        return requested;
    };
    let room = usize::try_from(limit.saturating_sub(DESCRIPTOR_RESERVE)).unwrap_or(usize::MAX);
    requested.min(room).max(1)
}

/// Raises the soft RLIMIT_NOFILE to the hard one; returns the soft limit then in force,
/// or `None` when it is unlimited or unknown.
#[cfg(unix)]
fn raise_descriptor_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes only the struct it is given, which outlives the call.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        tracing::warn!("reading the descriptor limit: {}", io::Error::last_os_error());
        return None;
    }
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: setrlimit reads only the struct it is given, which outlives the call.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            limit.rlim_cur = raised.rlim_cur;
        } else {
            // E.g. macOS refuses an unlimited hard limit; the soft one stays in force.
            tracing::debug!("raising the descriptor limit: {}", io::Error::last_os_error());
        }
    }
    // rlim_t is u64 on Linux but not on every unix.
    #[allow(clippy::useless_conversion)]
    let soft = u64::try_from(limit.rlim_cur).unwrap_or(u64::MAX);
    (limit.rlim_cur != libc::RLIM_INFINITY).then_some(soft)
}

#[cfg(not(unix))]
fn raise_descriptor_limit() -> Option<u64> {
    None
}

/// Why a connection was cut short.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Timeout {
    HeaderRead,
    BodyRead,
    Idle,
    /// The client left its response unread for the idle timeout.
    Write,
}

impl Timeout {
    const ALL: [Timeout; 4] = [Timeout::HeaderRead, Timeout::BodyRead, Timeout::Idle, Timeout::Write];

    fn label(self) -> &'static str {
        match self {
            Timeout::HeaderRead => "header_read",
            Timeout::BodyRead => "body_read",
            Timeout::Idle => "idle",
            Timeout::Write => "write",
        }
    }
}

/// What the connections do, for `GET /metrics`.
#[derive(Debug, Default)]
pub struct ConnectionStats {
    open: AtomicU64,
    refused: AtomicU64,
    max: AtomicU64,
    timed_out: [AtomicU64; Timeout::ALL.len()],
}

impl ConnectionStats {
    /// Connections being served now.
    pub fn open(&self) -> u64 {
        self.open.load(Ordering::Relaxed)
    }

    /// Connections answered 503 and closed because the cap was reached.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// The cap in force.
    pub fn max(&self) -> u64 {
        self.max.load(Ordering::Relaxed)
    }

    /// Connections closed (or requests answered 408) by each timeout, by its label.
    pub fn timed_out(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        Timeout::ALL
            .iter()
            .map(|&t| (t.label(), self.timed_out[t as usize].load(Ordering::Relaxed)))
    }

    fn count_timeout(&self, timeout: Timeout) {
        self.timed_out[timeout as usize].fetch_add(1, Ordering::Relaxed);
    }
}

/// Accepts connections on `listener` and serves each with `router` under `limits` until
/// `shutdown` resolves; then stops accepting and returns once every connection has
/// finished its in-flight request and closed. Dropping the future drops every connection
/// (and the requests in flight on them) at once.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    stats: Arc<ConnectionStats>,
    shutdown: impl Future<Output = ()>,
) {
    stats.max.store(
        u64::try_from(limits.max_connections).unwrap_or(u64::MAX),
        Ordering::Relaxed,
    );
    let slots = Arc::new(Semaphore::new(limits.max_connections.min(Semaphore::MAX_PERMITS)));
    let graceful = GracefulShutdown::new();
    let mut refusals = Throttle::new(LOG_EVERY);
    let mut accept_errors = Throttle::new(LOG_EVERY);
    // Owning the connection tasks lets a drop of this future end them.
    let mut tasks = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        // Reaps the tasks of connections that have ended.
        while tasks.try_join_next().is_some() {}
        match accepted {
            Ok((stream, peer)) => match slots.clone().try_acquire_owned() {
                Ok(permit) => {
                    let slot = ConnectionSlot::take(stats.clone(), permit);
                    let connection = Connection {
                        peer,
                        limits,
                        stats: stats.clone(),
                    };
                    tasks.spawn(connection.serve(stream, router.clone(), graceful.watcher(), slot));
                }
                Err(_) => {
                    stats.refused.fetch_add(1, Ordering::Relaxed);
                    refuse(stream);
                    if let Some(refused) = refusals.hit(Instant::now()) {
                        tracing::warn!(
                            refused,
                            max_connections = limits.max_connections,
                            "connection cap reached: new connections are answered 503 and closed \
                             (`refused` counts them since the last such line)"
                        );
                    }
                }
            },
            // The client gave up before it was accepted: nothing to back off from.
            Err(error) if is_connection_error(&error) => tracing::debug!("accepting a connection: {error}"),
            Err(error) => {
                if let Some(failures) = accept_errors.hit(Instant::now()) {
                    tracing::warn!(failures, "accepting connections failed: {error}; retrying shortly");
                }
                tokio::select! {
                    () = &mut shutdown => break,
                    () = tokio::time::sleep(ACCEPT_BACKOFF) => {}
                }
            }
        }
    }
    // New connections are refused by the kernel from here on.
    drop(listener);
    let open = graceful.count();
    if open > 0 {
        tracing::info!(open, "stopped accepting; waiting for open connections to finish");
    }
    graceful.shutdown().await;
}

/// Per-connection accept errors: the connection is gone, the listener is fine.
fn is_connection_error(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
    )
}

/// Answers a connection beyond the cap with [`REFUSAL`] and closes it, without waiting
/// on the client.
fn refuse(stream: TcpStream) {
    // A plain non-blocking socket: one write into the fresh, empty send buffer. (tokio's
    // `try_write` could report WouldBlock before the reactor has seen the socket writable.)
    let Ok(mut stream) = stream.into_std() else {
        return;
    };
    let _ = stream.write(REFUSAL);
    // Reading what the client already sent lets the close go out as FIN rather than RST;
    // a RST can make the client's stack drop the 503 before it is read.
    let mut scratch = [0u8; 1024];
    for _ in 0..16 {
        match stream.read(&mut scratch) {
            Ok(n) if n > 0 => {}
            _ => break,
        }
    }
    let _ = stream.shutdown(Shutdown::Both);
}

/// Counts events and lets a log line through at most once per period, carrying how many
/// events it stands for.
struct Throttle {
    every: Duration,
    last: Option<Instant>,
    unlogged: u64,
}

impl Throttle {
    fn new(every: Duration) -> Self {
        Self {
            every,
            last: None,
            unlogged: 0,
        }
    }

    /// Counts one event; returns the count to report when a line is due.
    fn hit(&mut self, now: Instant) -> Option<u64> {
        self.unlogged += 1;
        if self
            .last
            .is_some_and(|last| now.saturating_duration_since(last) < self.every)
        {
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.unlogged))
    }
}

/// A served connection's place under the cap: its permit and its count in the open
/// gauge, both given back on drop.
struct ConnectionSlot {
    stats: Arc<ConnectionStats>,
    _permit: OwnedSemaphorePermit,
}

impl ConnectionSlot {
    fn take(stats: Arc<ConnectionStats>, permit: OwnedSemaphorePermit) -> Self {
        stats.open.fetch_add(1, Ordering::Relaxed);
        Self { stats, _permit: permit }
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.stats.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One accepted connection.
struct Connection {
    peer: SocketAddr,
    limits: Limits,
    stats: Arc<ConnectionStats>,
}

impl Connection {
    /// Serves requests on `stream` until the client closes, a timeout cuts it short or
    /// the server shuts down.
    async fn serve(self, stream: TcpStream, router: Router, watcher: Watcher, slot: ConnectionSlot) {
        let _slot = slot;
        // Small answers go out at once rather than after Nagle's delay.
        let _ = stream.set_nodelay(true);
        let activity = Arc::new(Activity::new());
        let io = TrackedIo {
            stream,
            activity: activity.clone(),
            write_blocked: false,
        };
        let service = RequestService {
            router: TowerToHyperService::new(router),
            activity: activity.clone(),
            stats: self.stats.clone(),
            body_read_timeout: self.limits.body_read_timeout,
            peer: self.peer,
        };
        let mut builder = http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            // Only a backstop: the watchdog below closes the connection first.
            .header_read_timeout(self.limits.header_read_timeout.saturating_add(self.limits.idle_timeout));
        let connection = watcher.watch(builder.serve_connection(TokioIo::new(io), service));
        tokio::select! {
            served = connection => {
                if let Err(error) = served {
                    tracing::debug!(peer = %self.peer, "connection ended: {error}");
                }
            }
            timeout = activity.expiry(&self.limits) => {
                // Dropping the connection closes the socket; nothing is in flight but,
                // for a write timeout, an answer its client does not read.
                self.stats.count_timeout(timeout);
                tracing::debug!(peer = %self.peer, timeout = timeout.label(), "connection timed out; closing it");
            }
        }
    }
}

/// Where a connection stands, as its watchdog needs to know: written by the connection's
/// reads and writes and by its requests' start and end.
struct Activity {
    phase: Mutex<Phase>,
    /// Woken whenever a deadline may have come nearer; the watchdog then re-reads `phase`.
    changed: Notify,
}

#[derive(Clone, Copy, Debug)]
struct Phase {
    /// Requests handed to the router whose response has not been sent yet.
    in_flight: usize,
    /// When the connection last became ready for a request: its accept, the end of the
    /// last response, or the last progress of a blocked write after it.
    ready_since: Instant,
    /// Whether a response has been sent: waiting before the first one is reading its
    /// headers, waiting after one is idling.
    served: bool,
    /// When the first byte of the next request arrived, if it has.
    request_started: Option<Instant>,
    /// Since when the client has not taken what the server writes, if so.
    write_blocked_since: Option<Instant>,
}

impl Phase {
    fn new(now: Instant) -> Self {
        Self {
            in_flight: 0,
            ready_since: now,
            served: false,
            request_started: None,
            write_blocked_since: None,
        }
    }

    /// The deadline in force and the timeout it enforces; `None` while a request is being
    /// handled (its body read has its own deadline) or when a deadline is out of range.
    fn deadline(&self, limits: &Limits) -> Option<(Instant, Timeout)> {
        if let Some(since) = self.write_blocked_since {
            return Some((since.checked_add(limits.idle_timeout)?, Timeout::Write));
        }
        if self.in_flight > 0 {
            return None;
        }
        let (since, limit, timeout) = match self.request_started {
            Some(started) => (started, limits.header_read_timeout, Timeout::HeaderRead),
            None if self.served => (self.ready_since, limits.idle_timeout, Timeout::Idle),
            None => (self.ready_since, limits.header_read_timeout, Timeout::HeaderRead),
        };
        Some((since.checked_add(limit)?, timeout))
    }
}

impl Activity {
    fn new() -> Self {
        Self {
            phase: Mutex::new(Phase::new(Instant::now())),
            changed: Notify::new(),
        }
    }

    fn phase(&self) -> MutexGuard<'_, Phase> {
        // Nothing panics while holding the lock; a poisoned phase is still consistent.
        self.phase.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn bytes_arrived(&self) {
        let mut phase = self.phase();
        if phase.in_flight == 0 && phase.request_started.is_none() {
            phase.request_started = Some(Instant::now());
            drop(phase);
            self.changed.notify_one();
        }
    }

    fn write_blocked(&self, blocked: bool) {
        let mut phase = self.phase();
        if blocked {
            phase.write_blocked_since = Some(Instant::now());
            drop(phase);
            self.changed.notify_one();
        } else {
            phase.write_blocked_since = None;
            if phase.in_flight == 0 {
                // The connection was busy writing until now, not idle.
                phase.ready_since = Instant::now();
            }
        }
    }

    fn request_started(&self) {
        let mut phase = self.phase();
        phase.in_flight += 1;
        phase.request_started = None;
    }

    fn request_finished(&self) {
        let mut phase = self.phase();
        phase.in_flight = phase.in_flight.saturating_sub(1);
        if phase.in_flight == 0 {
            phase.ready_since = Instant::now();
            phase.served = true;
            phase.request_started = None;
            drop(phase);
            self.changed.notify_one();
        }
    }

    /// Resolves with the timeout once the connection overstays one.
    async fn expiry(&self, limits: &Limits) -> Timeout {
        loop {
            let next = self.phase().deadline(limits);
            match next {
                Some((at, timeout)) if at <= Instant::now() => return timeout,
                // `notify_one` keeps a permit, so a change between reading the phase and
                // waiting here is not missed.
                Some((at, _)) => tokio::select! {
                    () = tokio::time::sleep_until(at) => {}
                    () = self.changed.notified() => {}
                },
                None => self.changed.notified().await,
            }
        }
    }
}

/// The socket, reporting to its connection's [`Activity`] when a request's first bytes
/// arrive and when the client stops (or resumes) taking the server's writes.
struct TrackedIo {
    stream: TcpStream,
    activity: Arc<Activity>,
    /// Whether the last write was refused for want of room (saves locking per write).
    write_blocked: bool,
}

impl TrackedIo {
    fn wrote<T>(&mut self, polled: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        let blocked = polled.is_pending();
        if blocked != self.write_blocked {
            self.write_blocked = blocked;
            self.activity.write_blocked(blocked);
        }
        polled
    }
}

impl AsyncRead for TrackedIo {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.bytes_arrived();
        }
        polled
    }
}

impl AsyncWrite for TrackedIo {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write(cx, data);
        self.wrote(polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write_vectored(cx, data);
        self.wrote(polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// Hands a connection's requests to the router: puts the body read deadline on each
/// request body and keeps the connection's [`Activity`] informed of requests in flight.
struct RequestService {
    router: TowerToHyperService<Router>,
    activity: Arc<Activity>,
    stats: Arc<ConnectionStats>,
    body_read_timeout: Duration,
    peer: SocketAddr,
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
fn body_timeout_response() -> Response<Body> {
    let mut response = super::response::error(
        StatusCode::REQUEST_TIMEOUT,
        "the request body did not arrive within the body read timeout",
    );
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// A request counted in flight from its headers' arrival until its response is sent.
struct InFlight(Arc<Activity>);

impl InFlight {
    fn start(activity: Arc<Activity>) -> Self {
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
struct TrackedBody {
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
struct BodyReadTimeout;

/// A request body that fails with [`BodyReadTimeout`] once its deadline passes before
/// its end, and flags that it did.
struct DeadlineBody {
    inner: Incoming,
    deadline: Instant,
    /// Wakes the reader at the deadline while it waits for bytes.
    timer: Pin<Box<Sleep>>,
    expired: Arc<AtomicBool>,
    ended: bool,
}

impl DeadlineBody {
    fn new(inner: Incoming, timeout: Duration, expired: Arc<AtomicBool>) -> Self {
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

    fn expire(&mut self) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
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

#[cfg(test)]
mod tests {
    use super::*;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn limits() -> Limits {
        Limits {
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(60),
            max_connections: 8,
        }
    }

    #[test]
    fn the_cap_leaves_the_reserve_free() {
        assert_eq!(connection_cap(1024, None), 1024);
        assert_eq!(connection_cap(1024, Some(20_000)), 1024);
        assert_eq!(connection_cap(1024, Some(1024)), 1024 - 128);
        assert_eq!(connection_cap(8, Some(136)), 8);
        assert_eq!(connection_cap(8, Some(135)), 7);
        assert_eq!(connection_cap(8, Some(64)), 1, "never no connection at all");
    }

    #[test]
    fn throttle_lets_one_line_per_period_through_with_the_count() {
        let start = Instant::now();
        let mut throttle = Throttle::new(Duration::from_secs(10));
        assert_eq!(throttle.hit(start), Some(1));
        assert_eq!(throttle.hit(start + Duration::from_secs(1)), None);
        assert_eq!(throttle.hit(start + Duration::from_secs(9)), None);
        assert_eq!(throttle.hit(start + Duration::from_secs(10)), Some(3));
        assert_eq!(throttle.hit(start + Duration::from_secs(11)), None);
    }

    #[test]
    fn deadlines_follow_the_connection_phase() {
        let limits = limits();
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut phase = Phase::new(t0);
        assert_eq!(
            phase.deadline(&limits),
            Some((t0 + s(10), Timeout::HeaderRead)),
            "fresh"
        );
        phase.request_started = Some(t0 + s(1));
        assert_eq!(phase.deadline(&limits), Some((t0 + s(11), Timeout::HeaderRead)));
        phase.request_started = None;
        phase.in_flight = 1;
        assert_eq!(phase.deadline(&limits), None, "a request is being handled");
        phase.write_blocked_since = Some(t0 + s(2));
        assert_eq!(phase.deadline(&limits), Some((t0 + s(62), Timeout::Write)));
        phase.write_blocked_since = None;
        phase.in_flight = 0;
        phase.served = true;
        phase.ready_since = t0 + s(3);
        assert_eq!(phase.deadline(&limits), Some((t0 + s(63), Timeout::Idle)), "idle");
        phase.request_started = Some(t0 + s(50));
        assert_eq!(phase.deadline(&limits), Some((t0 + s(60), Timeout::HeaderRead)));
    }

    /// Pins down the hyper behaviour the module's design rests on: in hyper 1.x,
    /// `header_read_timeout` also closes a kept-alive connection that idles after a
    /// response, at the header timeout (so it cannot serve as a separate idle timeout).
    #[tokio::test]
    async fn hyper_header_read_timeout_also_closes_idle_connections() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            let mut builder = http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_millis(300));
            let service = hyper::service::service_fn(|_request| async {
                Ok::<_, Infallible>(Response::new(http_body_util::Full::new(Bytes::from_static(b"ok"))))
            });
            let _ = builder.serve_connection(TokioIo::new(stream), service).await;
        });
        let mut client = TcpStream::connect(address).await.unwrap();
        client.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
        let mut answer = Vec::new();
        let mut buf = [0u8; 1024];
        while !answer.ends_with(b"\r\n\r\nok") {
            let n = client.read(&mut buf).await.unwrap();
            assert!(n > 0, "closed before answering");
            answer.extend_from_slice(&buf[..n]);
        }
        let served = Instant::now();
        let n = tokio::time::timeout(Duration::from_secs(5), client.read(&mut buf))
            .await
            .expect("hyper closed the idle connection")
            .unwrap_or(0);
        let idle = served.elapsed();
        assert_eq!(n, 0, "no further bytes, only the close");
        assert!(
            idle >= Duration::from_millis(250) && idle < Duration::from_millis(1500),
            "closed after {idle:?} of idling"
        );
    }
}
