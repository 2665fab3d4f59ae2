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
//! - **count**: at most [`ConnectionLimits::max_connections`] connections are served at once, a cap
//!   lowered at start so that [`DESCRIPTOR_RESERVE`] descriptors stay free for model
//!   loads and reloads. A connection beyond the cap is answered 503 at once and closed;
//!   refusals are counted (`GET /metrics`) and logged at most once per [`LOG_EVERY`].
//!
//! The header and idle timeouts are enforced by a watchdog per connection rather than by
//! hyper: hyper's `header_read_timeout` starts as soon as a connection is ready for a
//! request, so it also closes idle kept-alive connections at the header timeout (the test
//! `hyper_header_read_timeout_also_closes_idle_connections` pins this down), which would
//! make any idle timeout longer than the header timeout meaningless. hyper gets no timer
//! at all: its header timeout would arm (and disarm) a timer for every request, a few
//! percent of a small request's CPU, for what the watchdog already enforces.
//!
//! On shutdown the loop stops accepting; connections finish their in-flight request
//! (hyper's graceful shutdown) and idle ones close at once.

mod limits;
mod request;
mod stats;
mod watchdog;

pub use limits::{connection_cap, ConnectionLimits, DESCRIPTOR_RESERVE};
pub use stats::{ConnectionStats, LOG_EVERY};

use std::future::Future;
use std::io::{self, Read as _, Write as _};
use std::net::{Shutdown, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;

use request::RequestService;
use stats::Throttle;
use watchdog::{Activity, TrackedIo};

/// Pause after an accept error such as EMFILE: the failed connection stays in the
/// backlog, so accepting again at once would fail again, in a busy loop.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// The whole answer to a connection beyond the cap.
const REFUSAL: &[u8] =
    b"HTTP/1.1 503 Service Unavailable\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";

/// Accepts connections on `listener` and serves each with `router` under `limits` until
/// `shutdown` resolves; each connection holds one of `slots` (shared with the gRPC port,
/// sized [`ConnectionLimits::max_connections`]) while open; then stops accepting and returns once every connection has
/// finished its in-flight request and closed. Dropping the future drops every connection
/// (and the requests in flight on them) at once.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    slots: Arc<Semaphore>,
    stats: Arc<ConnectionStats>,
    shutdown: impl Future<Output = ()>,
) {
    stats.max.store(
        u64::try_from(limits.max_connections).unwrap_or(u64::MAX),
        Ordering::Relaxed,
    );
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
    limits: ConnectionLimits,
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
        // The watchdog below enforces the header timeout; hyper's own needs a timer.
        builder.header_read_timeout(None);
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

#[cfg(test)]
mod tests {
    use super::*;

    use std::convert::Infallible;

    use axum::http::Response;
    use bytes::Bytes;
    use hyper_util::rt::TokioTimer;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

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
