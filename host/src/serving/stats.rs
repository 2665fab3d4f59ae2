//! What one model version counts and times: read by its statistics (`/v2/models/{m}/stats`,
//! gRPC `ModelStatistics`), by `/metrics` and by tests that prove batching.
//!
//! Counters are relaxed atomics, and so are the histograms ([`AtomicHistogram`]), which
//! are kept only when metrics are on. Requests are counted per protocol and answer status in fixed arrays, so
//! counting one costs an atomic add and no lock or allocation.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::histogram::AtomicHistogram;

use crate::model::StageKind;

/// The edge a request came in through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Rest,
    Grpc,
}

impl Protocol {
    pub const ALL: [Protocol; 2] = [Protocol::Rest, Protocol::Grpc];

    pub fn name(self) -> &'static str {
        match self {
            Protocol::Rest => "rest",
            Protocol::Grpc => "grpc",
        }
    }
}

/// How a request was answered: an HTTP status (REST) or a gRPC status code (gRPC).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answered {
    Http(u16),
    Grpc(i32),
}

/// HTTP statuses counted: 100..=599.
const HTTP_STATUSES: usize = 500;
/// gRPC status codes: 0 (OK) ..= 16 (UNAUTHENTICATED).
const GRPC_CODES: usize = 17;

/// The gRPC status codes' names, by number (as the gRPC specification spells them).
const GRPC_CODE_NAMES: [&str; GRPC_CODES] = [
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];

/// A gRPC status code's name ("OK", "INVALID_ARGUMENT", ...); "UNKNOWN" for a number
/// outside the specification's.
pub fn grpc_code_name(code: i32) -> &'static str {
    usize::try_from(code)
        .ok()
        .and_then(|i| GRPC_CODE_NAMES.get(i))
        .copied()
        .unwrap_or("UNKNOWN")
}

/// The latency histograms of one model version.
#[derive(Debug)]
pub struct Histograms {
    /// Seconds an item waited in the queue before its batch was dispatched.
    pub queue_wait: AtomicHistogram,
    /// Items per batch.
    pub batch_size: AtomicHistogram,
    /// Seconds each stage took per batch, by [`StageKind`] (preprocess, predict, postprocess).
    pub stage: [AtomicHistogram; 3],
    /// Seconds from a request's arrival at the edge to its answer, by [`Protocol`].
    pub request: [AtomicHistogram; 2],
}

impl Histograms {
    fn new() -> Self {
        // Latencies from 50 µs to ~26 s: a queue wait or a stage call of a few
        // microseconds up to the longest deadline anyone sets.
        let seconds = AtomicHistogram::latency;
        Self {
            queue_wait: seconds(),
            batch_size: AtomicHistogram::sizes(),
            stage: [seconds(), seconds(), seconds()],
            request: [seconds(), seconds()],
        }
    }
}

fn stage_index(kind: StageKind) -> usize {
    match kind {
        StageKind::Preprocess => 0,
        StageKind::Predict => 1,
        StageKind::Postprocess => 2,
    }
}

/// Counters and histograms of one model version.
#[derive(Debug)]
pub struct ModelStats {
    /// Batches handed to instances.
    pub batches: AtomicU64,
    /// Items in those batches.
    pub items: AtomicU64,
    /// Items dropped before running because their client had gone.
    pub items_abandoned: AtomicU64,
    /// Stage calls that trapped (each replaced its instance).
    pub traps: AtomicU64,
    /// Stage instances replaced after a trap, or pipelines rebuilt after a host panic.
    pub replacements: AtomicU64,
    /// Items that ended in success.
    pub items_ok: AtomicU64,
    /// Items that ended in an error.
    pub items_failed: AtomicU64,
    /// Items answered 504: a stage's time limit, or the request's deadline.
    pub timeouts: AtomicU64,
    /// Pipeline instances whose every stage is live (replacements included).
    pub instances_live: AtomicU64,
    /// Items that waited in the queue, and their total wait (Triton's `queue`).
    queue_items: AtomicU64,
    queue_ns: AtomicU64,
    /// Total time the instances spent running batches (Triton's `compute_infer`).
    compute_ns: AtomicU64,
    /// Requests answered in full (200 / OK) and otherwise, with their total durations
    /// (Triton's `success` and `fail` times).
    requests_ok: AtomicU64,
    requests_ok_ns: AtomicU64,
    requests_failed: AtomicU64,
    requests_failed_ns: AtomicU64,
    http_requests: Box<[AtomicU64]>,
    grpc_requests: [AtomicU64; GRPC_CODES],
    /// None when metrics are off (`--metrics off`).
    histograms: Option<Histograms>,
}

/// A plain copy of [`ModelStats`]' counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct StatsSnapshot {
    pub batches: u64,
    pub items: u64,
    pub items_abandoned: u64,
    pub traps: u64,
    pub replacements: u64,
    pub items_ok: u64,
    pub items_failed: u64,
    pub timeouts: u64,
    pub instances_live: u64,
    pub queue_items: u64,
    pub queue_ns: u64,
    pub compute_ns: u64,
    pub requests_ok: u64,
    pub requests_ok_ns: u64,
    pub requests_failed: u64,
    pub requests_failed_ns: u64,
}

impl Default for ModelStats {
    fn default() -> Self {
        Self::new(true)
    }
}

fn nanos(elapsed: Duration) -> u64 {
    u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX)
}

impl ModelStats {
    /// Zeroed counters; histograms only if `histograms` (metrics on).
    pub fn new(histograms: bool) -> Self {
        Self {
            batches: AtomicU64::new(0),
            items: AtomicU64::new(0),
            items_abandoned: AtomicU64::new(0),
            traps: AtomicU64::new(0),
            replacements: AtomicU64::new(0),
            items_ok: AtomicU64::new(0),
            items_failed: AtomicU64::new(0),
            timeouts: AtomicU64::new(0),
            instances_live: AtomicU64::new(0),
            queue_items: AtomicU64::new(0),
            queue_ns: AtomicU64::new(0),
            compute_ns: AtomicU64::new(0),
            requests_ok: AtomicU64::new(0),
            requests_ok_ns: AtomicU64::new(0),
            requests_failed: AtomicU64::new(0),
            requests_failed_ns: AtomicU64::new(0),
            http_requests: (0..HTTP_STATUSES).map(|_| AtomicU64::new(0)).collect(),
            grpc_requests: std::array::from_fn(|_| AtomicU64::new(0)),
            histograms: histograms.then(Histograms::new),
        }
    }

    pub fn snapshot(&self) -> StatsSnapshot {
        let read = |c: &AtomicU64| c.load(Ordering::Relaxed);
        StatsSnapshot {
            batches: read(&self.batches),
            items: read(&self.items),
            items_abandoned: read(&self.items_abandoned),
            traps: read(&self.traps),
            replacements: read(&self.replacements),
            items_ok: read(&self.items_ok),
            items_failed: read(&self.items_failed),
            timeouts: read(&self.timeouts),
            instances_live: read(&self.instances_live),
            queue_items: read(&self.queue_items),
            queue_ns: read(&self.queue_ns),
            compute_ns: read(&self.compute_ns),
            requests_ok: read(&self.requests_ok),
            requests_ok_ns: read(&self.requests_ok_ns),
            requests_failed: read(&self.requests_failed),
            requests_failed_ns: read(&self.requests_failed_ns),
        }
    }

    /// The histograms, when metrics are on.
    pub fn histograms(&self) -> Option<&Histograms> {
        self.histograms.as_ref()
    }

    /// An item waited `waited` in the queue.
    pub fn record_queue_wait(&self, waited: Duration) {
        self.queue_items.fetch_add(1, Ordering::Relaxed);
        self.queue_ns.fetch_add(nanos(waited), Ordering::Relaxed);
        if let Some(h) = &self.histograms {
            h.queue_wait.observe_duration(waited);
        }
    }

    /// A batch of `size` items ran through the pipeline in `elapsed`, each stage taking
    /// what `stages` says.
    pub fn record_batch(&self, size: usize, elapsed: Duration, stages: &[(StageKind, Duration)]) {
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.items.fetch_add(size as u64, Ordering::Relaxed);
        self.compute_ns.fetch_add(nanos(elapsed), Ordering::Relaxed);
        if let Some(h) = &self.histograms {
            h.batch_size.observe(size as u64);
            for (kind, took) in stages {
                h.stage[stage_index(*kind)].observe_duration(*took);
            }
        }
    }

    /// A part handed back by an earlier batch ran again (its items and its batch were
    /// counted then): its time only.
    pub fn record_rerun(&self, elapsed: Duration, stages: &[(StageKind, Duration)]) {
        self.compute_ns.fetch_add(nanos(elapsed), Ordering::Relaxed);
        if let Some(h) = &self.histograms {
            for (kind, took) in stages {
                h.stage[stage_index(*kind)].observe_duration(*took);
            }
        }
    }

    /// A request to this model was answered, `elapsed` after it arrived.
    pub fn record_request(&self, protocol: Protocol, answered: Answered, elapsed: Duration) {
        let counter = match answered {
            Answered::Http(status) => usize::from(status)
                .checked_sub(100)
                .and_then(|i| self.http_requests.get(i)),
            Answered::Grpc(code) => usize::try_from(code).ok().and_then(|i| self.grpc_requests.get(i)),
        };
        if let Some(counter) = counter {
            counter.fetch_add(1, Ordering::Relaxed);
        }
        let (count, ns) = match answered {
            Answered::Http(200) | Answered::Grpc(0) => (&self.requests_ok, &self.requests_ok_ns),
            _ => (&self.requests_failed, &self.requests_failed_ns),
        };
        count.fetch_add(1, Ordering::Relaxed);
        ns.fetch_add(nanos(elapsed), Ordering::Relaxed);
        if let Some(h) = &self.histograms {
            let index = Protocol::ALL.iter().position(|p| *p == protocol).unwrap_or(0);
            h.request[index].observe_duration(elapsed);
        }
    }

    /// Requests answered so far, as (protocol, status label, count), zero counts left out.
    /// REST statuses are numbers ("200"), gRPC codes names ("INVALID_ARGUMENT").
    pub fn requests(&self) -> Vec<(Protocol, String, u64)> {
        let mut rows = Vec::new();
        for (i, counter) in self.http_requests.iter().enumerate() {
            let count = counter.load(Ordering::Relaxed);
            if count > 0 {
                rows.push((Protocol::Rest, (i + 100).to_string(), count));
            }
        }
        for (name, counter) in GRPC_CODE_NAMES.iter().zip(&self.grpc_requests) {
            let count = counter.load(Ordering::Relaxed);
            if count > 0 {
                rows.push((Protocol::Grpc, (*name).to_owned(), count));
            }
        }
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_counted_by_protocol_and_status() {
        let stats = ModelStats::new(true);
        let ms = Duration::from_millis(1);
        stats.record_request(Protocol::Rest, Answered::Http(200), ms);
        stats.record_request(Protocol::Rest, Answered::Http(200), ms);
        stats.record_request(Protocol::Rest, Answered::Http(207), ms);
        stats.record_request(Protocol::Grpc, Answered::Grpc(3), ms);
        // Out of range: not counted, no panic.
        stats.record_request(Protocol::Rest, Answered::Http(42), ms);
        stats.record_request(Protocol::Grpc, Answered::Grpc(99), ms);
        stats.record_request(Protocol::Grpc, Answered::Grpc(-1), ms);
        assert_eq!(
            stats.requests(),
            vec![
                (Protocol::Rest, "200".into(), 2),
                (Protocol::Rest, "207".into(), 1),
                (Protocol::Grpc, "INVALID_ARGUMENT".into(), 1),
            ]
        );
    }

    #[test]
    fn without_metrics_there_are_no_histograms_but_counters_still_count() {
        let stats = ModelStats::new(false);
        stats.record_batch(
            4,
            Duration::from_millis(2),
            &[(StageKind::Predict, Duration::from_millis(1))],
        );
        stats.record_queue_wait(Duration::from_micros(10));
        assert!(stats.histograms().is_none());
        let s = stats.snapshot();
        assert_eq!((s.batches, s.items, s.queue_items, s.compute_ns), (1, 4, 1, 2_000_000));
    }
}
