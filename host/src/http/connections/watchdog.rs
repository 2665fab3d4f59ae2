//! A connection's watchdog: where the connection stands (waiting for a request, reading
//! one, requests in flight, its writes blocked) and which timeout is due next.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::limits::ConnectionLimits;
use super::stats::Timeout;

/// Where a connection stands, as its watchdog needs to know: written by the connection's
/// reads and writes and by its requests' start and end.
pub(super) struct Activity {
    phase: Mutex<Phase>,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Phase {
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
    pub(super) fn new(now: Instant) -> Self {
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
    pub(super) fn deadline(&self, limits: &ConnectionLimits) -> Option<(Instant, Timeout)> {
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

/// The shortest wait between two looks at the phase, whatever the limits (a limit of 0
/// would otherwise spin).
const MIN_RECHECK: std::time::Duration = std::time::Duration::from_millis(1);

impl Activity {
    pub(super) fn new() -> Self {
        Self {
            phase: Mutex::new(Phase::new(Instant::now())),
        }
    }

    pub(super) fn phase(&self) -> MutexGuard<'_, Phase> {
        // Nothing panics while holding the lock; a poisoned phase is still consistent.
        crate::sync::lock(&self.phase)
    }

    pub(super) fn bytes_arrived(&self) {
        let mut phase = self.phase();
        if phase.in_flight == 0 && phase.request_started.is_none() {
            phase.request_started = Some(Instant::now());
        }
    }

    pub(super) fn write_blocked(&self, blocked: bool) {
        let mut phase = self.phase();
        if blocked {
            phase.write_blocked_since = Some(Instant::now());
        } else {
            phase.write_blocked_since = None;
            if phase.in_flight == 0 {
                // The connection was busy writing until now, not idle.
                phase.ready_since = Instant::now();
            }
        }
    }

    pub(super) fn request_started(&self) {
        let mut phase = self.phase();
        phase.in_flight += 1;
        phase.request_started = None;
    }

    pub(super) fn request_finished(&self) {
        let mut phase = self.phase();
        phase.in_flight = phase.in_flight.saturating_sub(1);
        if phase.in_flight == 0 {
            phase.ready_since = Instant::now();
            phase.served = true;
            phase.request_started = None;
        }
    }

    /// Resolves with the timeout once the connection overstays one.
    ///
    /// Nothing wakes it when the phase changes: that cost two wake-ups of the
    /// connection's task (and two timer registrations) per request. Instead it never
    /// sleeps longer than the shortest limit. Every deadline a change can set lies at
    /// least that far after the change, hence after the wake-up already due, which then
    /// re-arms the timer at the exact deadline. An idle connection costs one wake-up per
    /// shortest limit (10 s by default).
    pub(super) async fn expiry(&self, limits: &ConnectionLimits) -> Timeout {
        let recheck = limits.header_read_timeout.min(limits.idle_timeout).max(MIN_RECHECK);
        loop {
            let now = Instant::now();
            let next = self.phase().deadline(limits);
            let wake = match next {
                Some((at, timeout)) if at <= now => return timeout,
                Some((at, _)) => now.checked_add(recheck).map_or(at, |recheck| at.min(recheck)),
                None => match now.checked_add(recheck) {
                    Some(recheck) => recheck,
                    None => return std::future::pending().await,
                },
            };
            tokio::time::sleep_until(wake).await;
        }
    }
}

/// The socket, reporting to its connection's [`Activity`] when a request's first bytes
/// arrive and when the client stops (or resumes) taking the server's writes.
pub(super) struct TrackedIo {
    pub(super) stream: TcpStream,
    pub(super) activity: Arc<Activity>,
    /// Whether the last write was refused for want of room (saves locking per write).
    pub(super) write_blocked: bool,
}

impl TrackedIo {
    pub(super) fn wrote<T>(&mut self, polled: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn limits() -> ConnectionLimits {
        ConnectionLimits {
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(60),
            max_connections: 8,
        }
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

    /// Runs the watchdog on the paused clock until it fires; its verdict and the seconds
    /// since `t0` at which it fired.
    fn watch(activity: &Arc<Activity>, t0: Instant) -> tokio::task::JoinHandle<(Timeout, u64)> {
        let activity = activity.clone();
        tokio::spawn(async move {
            let timeout = activity.expiry(&limits()).await;
            (timeout, (Instant::now() - t0).as_secs())
        })
    }

    // The watchdog is told nothing when the phase changes: these check that it still
    // fires at the exact deadline a change sets while it sleeps.
    #[tokio::test(start_paused = true)]
    async fn expiry_fires_at_a_deadline_set_while_it_slept() {
        let t0 = Instant::now();
        let activity = Arc::new(Activity::new());
        activity.request_started();
        activity.request_finished(); // idle from t0: closed at t0 + 60 s unless...
        let watcher = watch(&activity, t0);
        tokio::time::sleep(Duration::from_secs(55)).await;
        activity.bytes_arrived(); // ...a request starts: its headers are due at t0 + 65 s
        assert_eq!(watcher.await.unwrap(), (Timeout::HeaderRead, 65));
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_in_flight_holds_the_watchdog_off_until_it_ends() {
        let t0 = Instant::now();
        let activity = Arc::new(Activity::new());
        activity.bytes_arrived();
        activity.request_started();
        let watcher = watch(&activity, t0);
        tokio::time::sleep(Duration::from_secs(100)).await;
        assert!(!watcher.is_finished(), "no timeout while a request is handled");
        activity.request_finished(); // idle from t0 + 100 s
        assert_eq!(watcher.await.unwrap(), (Timeout::Idle, 160));
    }
}
