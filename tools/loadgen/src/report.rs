//! Counting (per client, then merged) and the final report, as a human line or JSON.

use std::fmt;
use std::time::Duration;

use anyhow::{anyhow, Result};
use hdrhistogram::Histogram;
use hyper::StatusCode;

/// The most of an error answer's body quoted in the first error's text.
const ERROR_BODY_CHARS: usize = 300;

/// What one client counted during the measured window.
pub struct ClientStats {
    /// Latency in microseconds of every request that got an answer (any status).
    latencies: Histogram<u64>,
    ok: u64,
    errors: u64,
    first_error: Option<String>,
}

impl ClientStats {
    /// `histogram` is an empty histogram with the bounds to use (cloned per client).
    pub fn new(histogram: Histogram<u64>) -> Self {
        ClientStats {
            latencies: histogram,
            ok: 0,
            errors: 0,
            first_error: None,
        }
    }

    /// A complete HTTP answer: 2xx is a success, anything else an error.
    pub fn count_response(&mut self, status: StatusCode, latency: Duration, body: &[u8]) {
        if status.is_success() {
            self.count_success(latency);
        } else {
            self.count_failure(latency, || format!("HTTP {status}: {}", quote_body(body)));
        }
    }

    /// A complete answer that is a success.
    pub fn count_success(&mut self, latency: Duration) {
        self.record(latency);
        self.ok += 1;
    }

    /// A complete answer that is an error (an HTTP status other than 2xx, a gRPC status
    /// other than OK); `describe` is asked for its text only if it is the first error.
    pub fn count_failure(&mut self, latency: Duration, describe: impl FnOnce() -> String) {
        self.record(latency);
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(describe());
        }
    }

    fn record(&mut self, latency: Duration) {
        let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX).max(1);
        self.latencies.saturating_record(micros);
    }

    /// A transport error or time-out (no answer); `counted` is false during warm-up, but the first
    /// error's text is kept anyway (it explains a run where nothing works).
    pub fn count_error(&mut self, counted: bool, text: String) {
        if counted {
            self.errors += 1;
        }
        if self.first_error.is_none() {
            self.first_error = Some(text);
        }
    }

    /// Successes and errors counted so far.
    #[cfg(test)]
    pub fn counts(&self) -> (u64, u64) {
        (self.ok, self.errors)
    }

    #[cfg(test)]
    pub fn first_error(&self) -> Option<&str> {
        self.first_error.as_deref()
    }

    pub fn merge(&mut self, other: ClientStats) -> Result<()> {
        self.latencies
            .add(&other.latencies)
            .map_err(|e| anyhow!("merging latency histograms: {e:?}"))?;
        self.ok += other.ok;
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
        Ok(())
    }
}

/// The start of an error answer's body, for the first error's text.
pub fn quote_body(body: &[u8]) -> String {
    String::from_utf8_lossy(body)
        .trim()
        .chars()
        .take(ERROR_BODY_CHARS)
        .collect()
}

/// The result of a run.
pub struct Summary {
    pub concurrency: u32,
    pub threads: u32,
    /// From the end of the warm-up to the last counted answer.
    pub elapsed: Duration,
    pub stats: ClientStats,
}

impl Summary {
    pub fn requests(&self) -> u64 {
        self.stats.ok + self.stats.errors
    }

    pub fn stats_errors(&self) -> u64 {
        self.stats.errors
    }

    /// Requests (successful or not) per second of the measured window.
    pub fn rps(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            self.requests() as f64 / secs
        } else {
            0.0
        }
    }

    fn quantile(&self, q: f64) -> u64 {
        self.stats.latencies.value_at_quantile(q)
    }

    /// Only reported when some error happened (or, from warm-up, explains a dead run).
    pub fn first_error(&self) -> Option<&str> {
        self.stats.first_error.as_deref()
    }

    pub fn to_json(&self) -> serde_json::Value {
        let h = &self.stats.latencies;
        serde_json::json!({
            "concurrency": self.concurrency,
            "threads": self.threads,
            "duration_s": self.elapsed.as_secs_f64(),
            "requests": self.requests(),
            "ok": self.stats.ok,
            "errors": self.stats.errors,
            "rps": self.rps(),
            "p50_us": self.quantile(0.50),
            "p90_us": self.quantile(0.90),
            "p99_us": self.quantile(0.99),
            "p999_us": self.quantile(0.999),
            "max_us": h.max(),
            "mean_us": h.mean(),
            "first_error": self.first_error(),
        })
    }
}

/// The human line: `concurrency=64 requests=… rps=… p50=…us p90=… p99=… p999=… max=… errors=…`.
impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "concurrency={} requests={} rps={:.1} p50={}us p90={}us p99={}us p999={}us max={}us errors={}",
            self.concurrency,
            self.requests(),
            self.rps(),
            self.quantile(0.50),
            self.quantile(0.90),
            self.quantile(0.99),
            self.quantile(0.999),
            self.stats.latencies.max(),
            self.stats.errors,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_and_reports() {
        let template = Histogram::new_with_bounds(1, 60_000_000, 3).expect("bounds");
        let mut a = ClientStats::new(template.clone());
        let mut b = ClientStats::new(template);
        for ms in 1..=100 {
            a.count_response(StatusCode::OK, Duration::from_micros(ms * 10), b"{}");
        }
        b.count_response(StatusCode::SERVICE_UNAVAILABLE, Duration::from_micros(5), b"queue full");
        b.count_error(false, "warm-up only".into());
        a.merge(b).expect("merge");
        let summary = Summary {
            concurrency: 2,
            threads: 1,
            elapsed: Duration::from_secs(1),
            stats: a,
        };
        assert_eq!(summary.requests(), 101);
        assert_eq!(summary.stats.errors, 1);
        assert_eq!(summary.first_error(), Some("HTTP 503 Service Unavailable: queue full"));
        let json = summary.to_json();
        assert_eq!(json["requests"], 101);
        assert_eq!(json["max_us"], 1000);
        assert!(summary
            .to_string()
            .starts_with("concurrency=2 requests=101 rps=101.0 p50=500us"));
    }
}
