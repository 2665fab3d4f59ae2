//! A Prometheus histogram of whole-number observations (nanoseconds, items) kept in
//! atomics: observing costs a bucket search and three relaxed atomic adds, and takes no
//! lock, so request and batch paths can record latencies for free (prometheus-client's
//! own histogram takes a lock per observation). Encoded through prometheus-client.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

/// Upper bounds of the latency buckets, in nanoseconds: 50 µs doubling to ~26 s.
pub const LATENCY_BOUNDS_NS: [u64; 20] = doubling(50_000);
/// Upper bounds of the batch-size buckets: 1 doubling to 1024.
pub const SIZE_BOUNDS: [u64; 11] = doubling(1);

const fn doubling<const N: usize>(first: u64) -> [u64; N] {
    let mut bounds = [0; N];
    let mut i = 0;
    while i < N {
        bounds[i] = first << i;
        i += 1;
    }
    bounds
}

/// Observations sorted into buckets by their upper bounds (plus one for the rest).
#[derive(Debug)]
pub struct AtomicHistogram {
    bounds: &'static [u64],
    /// What one unit of an observation is in the exported value (1e-9: ns → seconds).
    unit: f64,
    buckets: Box<[AtomicU64]>,
    sum: AtomicU64,
}

impl AtomicHistogram {
    pub fn new(bounds: &'static [u64], unit: f64) -> Self {
        Self {
            bounds,
            unit,
            buckets: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0),
        }
    }

    /// Seconds, observed in nanoseconds.
    pub fn latency() -> Self {
        Self::new(&LATENCY_BOUNDS_NS, 1e-9)
    }

    /// Counts (e.g. items per batch).
    pub fn sizes() -> Self {
        Self::new(&SIZE_BOUNDS, 1.0)
    }

    pub fn observe(&self, value: u64) {
        let bucket = self.bounds.partition_point(|bound| *bound < value);
        if let Some(counter) = self.buckets.get(bucket) {
            counter.fetch_add(1, Ordering::Relaxed);
        }
        self.sum.fetch_add(value, Ordering::Relaxed);
    }

    pub fn observe_duration(&self, elapsed: Duration) {
        self.observe(u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX));
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).sum()
    }
}

impl EncodeMetric for AtomicHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        // prometheus-client takes per-bucket counts and `f64::MAX` for +Inf.
        let buckets: Vec<(f64, u64)> = self
            .bounds
            .iter()
            .map(|bound| *bound as f64 * self.unit)
            .chain(std::iter::once(f64::MAX))
            .zip(self.buckets.iter().map(|b| b.load(Ordering::Relaxed)))
            .collect();
        let count = buckets.iter().map(|(_, n)| n).sum();
        let sum = self.sum.load(Ordering::Relaxed) as f64 * self.unit;
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_the_first_bucket_that_holds_them() {
        let h = AtomicHistogram::sizes();
        for v in [1, 2, 3, 4, 5, 1024, 1025, u64::MAX / 2] {
            h.observe(v);
        }
        let counts: Vec<u64> = h.buckets.iter().map(|b| b.load(Ordering::Relaxed)).collect();
        // le=1: 1; le=2: 2; le=4: 3, 4; le=8: 5; le=1024: 1024; +Inf: the rest.
        assert_eq!(counts, vec![1, 1, 2, 1, 0, 0, 0, 0, 0, 0, 1, 2]);
        assert_eq!(h.count(), 8);
    }

    #[test]
    fn latency_bounds_double_from_50_microseconds() {
        assert_eq!(LATENCY_BOUNDS_NS[0], 50_000);
        assert_eq!(LATENCY_BOUNDS_NS[19], 50_000 << 19);
    }
}
