//! Which failures are retried, and when.
//!
//! Retried: connection errors, answers that never came (`--timeout`), 503 (the model is
//! loading or its queue is full) and 504 (a time limit) — failures that say nothing about
//! the request itself. Never retried: every other status, which says the request (or an
//! item of it) is at fault and would fail again.
//!
//! The wait before retry `n` (from 1) is exponential with jitter: 100 ms × 2^(n−1), at
//! most 10 s, each wait drawn between half and all of that, so that many workers that
//! failed together do not come back together. When the server says how long to wait
//! (`Retry-After`), that is the wait (at most 60 s), plus up to a tenth of it.

use std::time::Duration;

use super::random::random_u64;

/// The first retry's wait, before jitter.
const BASE: Duration = Duration::from_millis(100);
/// The longest wait between retries, before jitter.
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// The longest `Retry-After` honoured.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// How often a line is retried.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RetryPolicy {
    /// Retries after the first attempt.
    pub retries: u32,
}

impl RetryPolicy {
    pub(crate) fn new(retries: u32) -> Self {
        RetryPolicy { retries }
    }

    /// Whether a line sent `attempts` times may be sent again.
    pub(crate) fn may_retry(&self, attempts: u32) -> bool {
        attempts <= self.retries
    }

    /// The wait before the next attempt of a line sent `attempts` times, given the
    /// server's `Retry-After`, if any.
    pub(crate) fn delay(&self, attempts: u32, retry_after: Option<Duration>) -> Duration {
        match retry_after {
            Some(after) => {
                let after = after.min(MAX_RETRY_AFTER);
                after + after.mul_f64(0.1 * unit_random())
            }
            None => backoff(attempts),
        }
    }
}

/// The jittered exponential wait before retry `n` (from 1).
pub(crate) fn backoff(n: u32) -> Duration {
    let exponent = n.saturating_sub(1).min(16);
    let full = BASE.saturating_mul(1 << exponent).min(MAX_BACKOFF);
    full.mul_f64(0.5 + 0.5 * unit_random())
}

/// A random number in [0, 1).
fn unit_random() -> f64 {
    (random_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// The wait an HTTP `Retry-After` value asks for: delay-seconds (an HTTP date is not
/// read, and gives the usual backoff).
pub(crate) fn parse_retry_after(value: &str) -> Option<Duration> {
    value.trim().parse::<u64>().ok().map(Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_grow_exponentially_with_jitter_and_a_cap() {
        for n in 1..=20 {
            let full = BASE.saturating_mul(1 << (n - 1).min(16)).min(MAX_BACKOFF);
            let wait = backoff(n);
            assert!(wait >= full / 2 && wait <= full, "retry {n}: {wait:?} vs {full:?}");
        }
        assert!(backoff(30) <= MAX_BACKOFF);
    }

    #[test]
    fn retry_after_is_honoured_within_bounds() {
        let policy = RetryPolicy::new(3);
        let wait = policy.delay(1, Some(Duration::from_secs(2)));
        assert!(
            wait >= Duration::from_secs(2) && wait <= Duration::from_millis(2200),
            "{wait:?}"
        );
        assert!(policy.delay(1, Some(Duration::from_secs(3600))) <= MAX_RETRY_AFTER.mul_f64(1.1));
        assert_eq!(parse_retry_after(" 1 "), Some(Duration::from_secs(1)));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
    }

    #[test]
    fn a_line_is_retried_at_most_retries_times() {
        let policy = RetryPolicy::new(2);
        assert!(policy.may_retry(1) && policy.may_retry(2));
        assert!(!policy.may_retry(3));
        assert!(!RetryPolicy::new(0).may_retry(1));
    }
}
