//! One simulated REST client: a single keep-alive HTTP/1.1 connection on which requests go
//! back to back (a closed loop: the next request leaves when the previous answer has been
//! read in full).
//!
//! A connection that breaks (transport error, time-out, server closed it) is replaced by
//! a new one before the next request; connecting is not part of any request's latency.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use bytes::Bytes;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{HeaderValue, CONTENT_TYPE, HOST};
use hyper::{Method, Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::report::ClientStats;
use crate::zipf::{Draws, Zipf};

/// After a failed connection attempt, wait this long before the next one, so that a dead
/// server is not hammered with connects.
const RECONNECT_PAUSE: Duration = Duration::from_millis(20);

/// Where and what to send; shared by every client.
pub struct Target {
    pub addr: SocketAddr,
    /// The `Host` header (the URL's authority).
    pub host: HeaderValue,
    /// The request target in origin form (`/v2/models/digits/infer`); with several
    /// models, one per model, drawn by `spread`.
    pub paths: Vec<Uri>,
    /// How requests pick among `paths` (several models).
    pub spread: Option<Zipf>,
    pub content_type: HeaderValue,
    /// Request bodies, POSTed in rotation; none means plain GETs.
    pub bodies: Vec<Bytes>,
}

/// When to count and when to stop; the same for every client.
#[derive(Clone, Copy)]
pub struct Schedule {
    /// Requests that start before this are warm-up: sent, but not counted.
    pub measure_from: Instant,
    /// No request starts at or after this.
    pub end: Instant,
    /// A request (or a connection attempt) that takes longer than this is an error.
    pub timeout: Duration,
    /// REST: the least time from one request of a client to its next (`--rate`).
    pub pace: Option<Duration>,
}

type Sender = SendRequest<Full<Bytes>>;

/// Awaits `connecting` within the schedule's timeout; a failure is counted as an error
/// (and followed by a short pause, so that a refusing server is not hammered).
pub async fn connect_counted<T>(
    schedule: &Schedule,
    stats: &mut ClientStats,
    addr: SocketAddr,
    connecting: impl std::future::Future<Output = anyhow::Result<T>>,
) -> Option<T> {
    match tokio::time::timeout(schedule.timeout, connecting).await {
        Ok(Ok(connected)) => Some(connected),
        Ok(Err(e)) => {
            stats.count_error(Instant::now() >= schedule.measure_from, format!("{e:#}"));
            tokio::time::sleep(RECONNECT_PAUSE).await;
            None
        }
        Err(_) => {
            let text = format!("connecting to {addr} timed out after {:?}", schedule.timeout);
            stats.count_error(Instant::now() >= schedule.measure_from, text);
            None
        }
    }
}

/// Runs client number `index` until `schedule.end`; returns what it counted.
pub async fn run(index: usize, target: Arc<Target>, schedule: Schedule, histogram: Histogram<u64>) -> ClientStats {
    let mut stats = ClientStats::new(histogram);
    // Each client starts at its own line, so concurrent requests carry different bodies.
    let mut next_body = index;
    let mut draws = Draws::seeded(index as u64 + 1);
    let mut connection: Option<Sender> = None;

    loop {
        if Instant::now() >= schedule.end {
            break;
        }
        if connection.as_ref().is_none_or(Sender::is_closed) {
            connection = connect_counted(&schedule, &mut stats, target.addr, connect(target.addr)).await;
            if connection.is_none() {
                continue;
            }
        }
        let Some(sender) = connection.as_mut() else { continue };

        let path = match &target.spread {
            Some(zipf) => zipf.pick(draws.next_unit()),
            None => 0,
        };
        let request = build_request(&target, next_body, path);
        next_body = next_body.wrapping_add(1);

        let started = Instant::now();
        if started >= schedule.end {
            break;
        }
        let counted = started >= schedule.measure_from;
        let outcome = tokio::time::timeout(schedule.timeout, exchange(sender, request)).await;
        let latency = started.elapsed();
        if let Some(pace) = schedule.pace {
            tokio::time::sleep_until((started + pace).min(schedule.end)).await;
        }
        match outcome {
            Ok(Ok((status, body))) => {
                if counted {
                    stats.count_response(status, latency, &body);
                }
            }
            Ok(Err(e)) => {
                connection = None;
                stats.count_error(counted, format!("{e:#}"));
            }
            Err(_) => {
                // The answer may still arrive on this connection: never reuse it.
                connection = None;
                stats.count_error(counted, format!("no complete answer within {:?}", schedule.timeout));
            }
        }
    }
    stats
}

/// Opens a TCP connection with TCP_NODELAY and performs the HTTP/1.1 client handshake;
/// the connection itself is driven by a task of its own.
async fn connect(addr: SocketAddr) -> Result<Sender> {
    let stream = TcpStream::connect(addr)
        .await
        .with_context(|| format!("connecting to {addr}"))?;
    stream.set_nodelay(true).context("setting TCP_NODELAY")?;
    let (sender, connection) = http1::handshake(TokioIo::new(stream))
        .await
        .context("HTTP/1.1 handshake")?;
    tokio::spawn(async move {
        // A broken connection shows up as an error of the request that was using it.
        let _ = connection.await;
    });
    Ok(sender)
}

/// The `index`-th request of the rotation (bodies are shared `Bytes`: no copy).
fn build_request(target: &Target, index: usize, path: usize) -> Request<Full<Bytes>> {
    let body = if target.bodies.is_empty() {
        Bytes::new()
    } else {
        target.bodies[index % target.bodies.len()].clone()
    };
    let mut request = Request::new(Full::new(body));
    if let Some(path) = target.paths.get(path) {
        *request.uri_mut() = path.clone();
    }
    request.headers_mut().insert(HOST, target.host.clone());
    if !target.bodies.is_empty() {
        *request.method_mut() = Method::POST;
        request.headers_mut().insert(CONTENT_TYPE, target.content_type.clone());
    }
    request
}

/// Sends one request and reads its whole answer (so the connection can be reused).
async fn exchange(sender: &mut Sender, request: Request<Full<Bytes>>) -> Result<(StatusCode, Bytes)> {
    sender.ready().await.context("connection closed")?;
    let response = sender.send_request(request).await.context("sending the request")?;
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .context("reading the response body")?
        .to_bytes();
    Ok((status, body))
}
