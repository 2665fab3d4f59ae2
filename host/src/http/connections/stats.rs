//! What the connections do, counted for `GET /metrics`, and the throttle that keeps
//! warnings about them to one line per period.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// At most one warning of each rate-limited kind (refusals, accept errors) is logged per
/// this period.
pub const LOG_EVERY: Duration = Duration::from_secs(10);

/// Why a connection was cut short.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Timeout {
    HeaderRead,
    BodyRead,
    Idle,
    /// The client left its response unread for the idle timeout.
    Write,
}

impl Timeout {
    const ALL: [Timeout; 4] = [Timeout::HeaderRead, Timeout::BodyRead, Timeout::Idle, Timeout::Write];

    pub(super) fn label(self) -> &'static str {
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
    pub(super) open: AtomicU64,
    pub(super) refused: AtomicU64,
    pub(super) max: AtomicU64,
    pub(super) timed_out: [AtomicU64; Timeout::ALL.len()],
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

    pub(super) fn count_timeout(&self, timeout: Timeout) {
        self.timed_out[timeout as usize].fetch_add(1, Ordering::Relaxed);
    }
}

/// Counts events and lets a log line through at most once per period, carrying how many
/// events it stands for.
pub(super) struct Throttle {
    every: Duration,
    last: Option<Instant>,
    unlogged: u64,
}

impl Throttle {
    pub(super) fn new(every: Duration) -> Self {
        Self {
            every,
            last: None,
            unlogged: 0,
        }
    }

    /// Counts one event; returns the count to report when a line is due.
    pub(super) fn hit(&mut self, now: Instant) -> Option<u64> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
