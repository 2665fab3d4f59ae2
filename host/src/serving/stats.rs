//! What one model version counts and times: read by its statistics (`/v2/models/{m}/stats`,
//! gRPC `ModelStatistics`), by `/metrics` and by tests that prove batching.
//!
//! Counters are relaxed atomics, and so are the histograms ([`AtomicHistogram`]), which
//! are kept only when metrics are on. Requests are counted by the [`EdgeLabel`] their edge
//! passes and by protocol-neutral status, in fixed arrays: counting one costs a few atomic
//! reads and adds, and no lock or allocation. The edges the server serves have their
//! counters from the start (their series read zero until a request comes); any other
//! edge gets its counters with its first request.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::exemplar::HistogramWithExemplars;
use prometheus_client::metrics::MetricType;

use super::histogram::{AtomicHistogram, LATENCY_BOUNDS_NS};

use crate::model::StageKind;
use crate::pipeline::PaddingCount;

/// The label an edge passes with every request it answers: under what name its requests
/// are counted, and how the metrics page names the statuses it answered. Each edge
/// defines its own; the statistics know none of them by name.
#[derive(Debug)]
pub struct EdgeLabel {
    /// The `protocol` label of the edge's series ("rest", "grpc").
    pub name: &'static str,
    /// The `status` label of a protocol-neutral status answered through the edge, for an
    /// edge whose wire status is not that number (several numbers may share a name); None:
    /// the number itself.
    pub status_name: Option<fn(u16) -> &'static str>,
}

/// Protocol-neutral statuses counted: 100..=599.
const STATUSES: usize = 500;
/// Edges counted apart per model version; the requests of any more are counted in the
/// totals only.
const EDGES: usize = 5;

/// The requests one edge answered for one model version.
#[derive(Debug)]
struct EdgeRequests {
    edge: &'static EdgeLabel,
    /// By protocol-neutral status, from 100.
    statuses: Box<[AtomicU64]>,
    /// Seconds from a request's arrival at the edge to its answer; None when metrics are off.
    duration: Option<RequestDurations>,
}

impl EdgeRequests {
    fn new(edge: &'static EdgeLabel, histogram: bool) -> Self {
        Self {
            edge,
            statuses: (0..STATUSES).map(|_| AtomicU64::new(0)).collect(),
            duration: histogram.then(RequestDurations::new),
        }
    }
}

/// A request-duration histogram: lock-free, or, with tracing on and `--trace-exemplars`,
/// one whose buckets each keep the trace id of the latest sampled request that fell in it,
/// as an OpenMetrics exemplar (from a p99 on a dashboard to the very trace). The
/// exemplars' histogram (prometheus-client's; its exemplars cannot be given to another)
/// takes locks on every observation, which measured several percent of throughput at
/// c = 64, so it is asked for.
#[derive(Debug)]
pub enum RequestDurations {
    Plain(AtomicHistogram),
    Traced(HistogramWithExemplars<TraceExemplar>),
}

/// An exemplar's labels: the trace it points to.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TraceExemplar {
    trace_id: String,
}

impl RequestDurations {
    fn new() -> Self {
        if crate::traces::exemplars() {
            let bounds = LATENCY_BOUNDS_NS.iter().map(|ns| *ns as f64 * 1e-9);
            RequestDurations::Traced(HistogramWithExemplars::new(bounds))
        } else {
            RequestDurations::Plain(AtomicHistogram::latency())
        }
    }

    fn observe(&self, elapsed: Duration, trace_id: Option<&str>) {
        match self {
            RequestDurations::Plain(histogram) => histogram.observe_duration(elapsed),
            RequestDurations::Traced(histogram) => {
                let exemplar = trace_id.map(|id| TraceExemplar {
                    trace_id: id.to_owned(),
                });
                let at = exemplar.is_some().then(std::time::SystemTime::now);
                histogram.observe(elapsed.as_secs_f64(), exemplar, at);
            }
        }
    }
}

impl EncodeMetric for RequestDurations {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        match self {
            RequestDurations::Plain(histogram) => histogram.encode(encoder),
            RequestDurations::Traced(histogram) => histogram.encode(encoder),
        }
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
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
    /// Elements of ragged tensors predict was given: the items' own, and the padding.
    pub ragged_elements: AtomicU64,
    pub padding_elements: AtomicU64,
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
    /// Requests by the edge they came through, each edge in the first slot free when it
    /// answered its first request.
    edges: [OnceLock<EdgeRequests>; EDGES],
    /// None when metrics are off (`--metrics off`), or kept server-wide only (on-demand
    /// residency, unless the model's `[metrics] histograms` asks for its own).
    histograms: Option<Histograms>,
    /// The server's statistics of every model together, which everything counted here is
    /// counted in too: the latency histograms a page keeps however many models there are.
    server: Option<Arc<ModelStats>>,
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
    pub ragged_elements: u64,
    pub padding_elements: u64,
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
        Self::new(true, &[])
    }
}

fn nanos(elapsed: Duration) -> u64 {
    u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX)
}

impl ModelStats {
    /// Zeroed counters, with those of `edges` (the edges the server serves) in place;
    /// histograms only if `histograms` (metrics on).
    pub fn new(histograms: bool, edges: &[&'static EdgeLabel]) -> Self {
        let stats = Self {
            batches: AtomicU64::new(0),
            items: AtomicU64::new(0),
            items_abandoned: AtomicU64::new(0),
            traps: AtomicU64::new(0),
            replacements: AtomicU64::new(0),
            items_ok: AtomicU64::new(0),
            items_failed: AtomicU64::new(0),
            timeouts: AtomicU64::new(0),
            instances_live: AtomicU64::new(0),
            ragged_elements: AtomicU64::new(0),
            padding_elements: AtomicU64::new(0),
            queue_items: AtomicU64::new(0),
            queue_ns: AtomicU64::new(0),
            compute_ns: AtomicU64::new(0),
            requests_ok: AtomicU64::new(0),
            requests_ok_ns: AtomicU64::new(0),
            requests_failed: AtomicU64::new(0),
            requests_failed_ns: AtomicU64::new(0),
            edges: std::array::from_fn(|_| OnceLock::new()),
            histograms: histograms.then(Histograms::new),
            server: None,
        };
        for edge in edges {
            stats.edge_requests(edge);
        }
        stats
    }

    /// The same, counting everything in `server` too (the server-wide statistics).
    pub fn counted_in(self, server: Option<Arc<ModelStats>>) -> Self {
        Self { server, ..self }
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
            ragged_elements: read(&self.ragged_elements),
            padding_elements: read(&self.padding_elements),
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
        if let Some(server) = &self.server {
            server.record_queue_wait(waited);
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
        if let Some(server) = &self.server {
            server.record_batch(size, elapsed, stages);
        }
    }

    /// What a batch's predict calls held of ragged tensors (`[batching.pad]`).
    pub fn record_padding(&self, count: PaddingCount) {
        if count != PaddingCount::default() {
            self.ragged_elements.fetch_add(count.ragged, Ordering::Relaxed);
            self.padding_elements.fetch_add(count.padding, Ordering::Relaxed);
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
        if let Some(server) = &self.server {
            server.record_rerun(elapsed, stages);
        }
    }

    /// A request to this model came in through `edge` and was answered with the
    /// protocol-neutral `status` (an HTTP status number: 200 in full, anything else a
    /// failure), `elapsed` after it arrived.
    /// `trace_id`: the request's, when it was traced (an exemplar of its duration).
    pub fn record_request(&self, edge: &'static EdgeLabel, status: u16, elapsed: Duration, trace_id: Option<&str>) {
        if let Some(server) = &self.server {
            server.record_request(edge, status, elapsed, trace_id);
        }
        let (count, ns) = if status == 200 {
            (&self.requests_ok, &self.requests_ok_ns)
        } else {
            (&self.requests_failed, &self.requests_failed_ns)
        };
        count.fetch_add(1, Ordering::Relaxed);
        ns.fetch_add(nanos(elapsed), Ordering::Relaxed);
        let Some(requests) = self.edge_requests(edge) else {
            return;
        };
        if let Some(counter) = usize::from(status)
            .checked_sub(100)
            .and_then(|i| requests.statuses.get(i))
        {
            counter.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(histogram) = &requests.duration {
            histogram.observe(elapsed, trace_id);
        }
    }

    /// `edge`'s counters: its slot, or the first free one (taken for it); None when every
    /// slot is another edge's.
    fn edge_requests(&self, edge: &'static EdgeLabel) -> Option<&EdgeRequests> {
        self.edges
            .iter()
            .map(|slot| slot.get_or_init(|| EdgeRequests::new(edge, self.histograms.is_some())))
            .find(|requests| requests.edge.name == edge.name)
    }

    /// The edges that answered requests to this model, in the order they first did, each
    /// with its request-duration histogram (when metrics are on).
    pub fn edges(&self) -> impl Iterator<Item = (&'static EdgeLabel, Option<&RequestDurations>)> {
        self.edges
            .iter()
            .filter_map(OnceLock::get)
            .map(|requests| (requests.edge, requests.duration.as_ref()))
    }

    /// Requests answered so far, as (edge, status label, count), zero counts left out: the
    /// status number, or the name the edge gives it (statuses of one name counted
    /// together, in the order of their first number).
    pub fn requests(&self) -> Vec<(&'static str, Cow<'static, str>, u64)> {
        let mut rows: Vec<(&'static str, Cow<'static, str>, u64)> = Vec::new();
        for requests in self.edges.iter().filter_map(OnceLock::get) {
            let first = rows.len();
            for (i, counter) in requests.statuses.iter().enumerate() {
                let count = counter.load(Ordering::Relaxed);
                if count == 0 {
                    continue;
                }
                let status = u16::try_from(i + 100).unwrap_or(u16::MAX);
                let label = match requests.edge.status_name {
                    None => Cow::Owned(status.to_string()),
                    Some(name) => Cow::Borrowed(name(status)),
                };
                match rows[first..].iter_mut().find(|row| row.1 == label) {
                    Some(row) => row.2 += count,
                    None => rows.push((requests.edge.name, label, count)),
                }
            }
        }
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static REST: EdgeLabel = EdgeLabel {
        name: "rest",
        status_name: None,
    };
    static NAMED: EdgeLabel = EdgeLabel {
        name: "named",
        status_name: Some(|status| if status < 500 { "CLIENT" } else { "SERVER" }),
    };

    #[test]
    fn requests_are_counted_by_edge_and_status() {
        let stats = ModelStats::new(true, &[]);
        let ms = Duration::from_millis(1);
        stats.record_request(&REST, 200, ms, None);
        stats.record_request(&NAMED, 422, ms, None);
        stats.record_request(&REST, 200, ms, None);
        stats.record_request(&REST, 207, ms, None);
        stats.record_request(&NAMED, 400, ms, None);
        stats.record_request(&NAMED, 503, ms, None);
        // Out of range: not counted by status, no panic.
        stats.record_request(&REST, 42, ms, None);
        stats.record_request(&REST, 600, ms, None);
        assert_eq!(
            stats.requests(),
            vec![
                ("rest", "200".into(), 2),
                ("rest", "207".into(), 1),
                ("named", "CLIENT".into(), 2),
                ("named", "SERVER".into(), 1),
            ]
        );
        let s = stats.snapshot();
        assert_eq!((s.requests_ok, s.requests_failed), (2, 6));
        let durations: Vec<_> = stats
            .edges()
            .map(|(edge, h)| match h {
                Some(RequestDurations::Plain(h)) => (edge.name, Some(h.count())),
                _ => (edge.name, None),
            })
            .collect();
        assert_eq!(durations, vec![("rest", Some(5)), ("named", Some(3))]);
    }

    #[test]
    fn without_metrics_there_are_no_histograms_but_counters_still_count() {
        let stats = ModelStats::new(false, &[]);
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
