//! `wasi:nn`'s counters on `/metrics`, process-wide: graph loads refused by the limit
//! they ran into (a refused model is not serving, so they cannot be a model's series),
//! and computes stopped by the host, with the time they ran past their deadline.

use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::MetricType;

use super::budget::Refusal;

const REFUSALS: [Refusal; 6] = [
    Refusal::Invalid,
    Refusal::Memory,
    Refusal::Nodes,
    Refusal::Subgraph,
    Refusal::ValueSize,
    Refusal::Time,
];

static REFUSED: [AtomicU64; 6] = [const { AtomicU64::new(0) }; 6];
static STOPPED_DEADLINE: AtomicU64 = AtomicU64::new(0);
static STOPPED_MEMORY: AtomicU64 = AtomicU64::new(0);
static OVERRUN_MICROS: AtomicU64 = AtomicU64::new(0);

fn slot(refusal: Refusal) -> usize {
    match refusal {
        Refusal::Invalid => 0,
        Refusal::Memory => 1,
        Refusal::Nodes => 2,
        Refusal::Subgraph => 3,
        Refusal::ValueSize => 4,
        Refusal::Time => 5,
    }
}

/// Counts a graph load refused for `refusal`.
pub fn graph_refused(refusal: Refusal) {
    REFUSED[slot(refusal)].fetch_add(1, Ordering::Relaxed);
}

/// Counts a compute that ended past its deadline, `overrun` after it (stopped between
/// two nodes, or done past it).
pub fn compute_past_deadline(overrun: std::time::Duration) {
    STOPPED_DEADLINE.fetch_add(1, Ordering::Relaxed);
    OVERRUN_MICROS.fetch_add(
        u64::try_from(overrun.as_micros()).unwrap_or(u64::MAX),
        Ordering::Relaxed,
    );
}

/// Counts a compute stopped before a value too large for the instance.
pub fn compute_too_large() {
    STOPPED_MEMORY.fetch_add(1, Ordering::Relaxed);
}

/// The counters, for the server's registry.
#[derive(Debug)]
pub struct NnCollector;

impl Collector for NnCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut metric = encoder.encode_descriptor(
            "tensorplug_nn_graph_loads_refused",
            "wasi:nn graph loads refused, by the limit they ran into (graph_memory_mib, graph_max_nodes, memory_mib, load_timeout, subgraph, invalid)",
            None,
            MetricType::Counter,
        )?;
        for refusal in &REFUSALS {
            let count = REFUSED[slot(*refusal)].load(Ordering::Relaxed);
            ConstCounter::new(count).encode(metric.encode_family(&[("limit", refusal.label())])?)?;
        }
        let mut metric = encoder.encode_descriptor(
            "tensorplug_nn_computes_stopped",
            "wasi:nn computes stopped by the host: at their call's deadline (limits.timeout_ms, init_timeout_ms), or before a value larger than the instance's memory (limits.memory_mib)",
            None,
            MetricType::Counter,
        )?;
        for (reason, count) in [("deadline", &STOPPED_DEADLINE), ("memory_mib", &STOPPED_MEMORY)] {
            ConstCounter::new(count.load(Ordering::Relaxed)).encode(metric.encode_family(&[("reason", reason)])?)?;
        }
        let metric = encoder.encode_descriptor(
            "tensorplug_nn_compute_overrun_seconds",
            "Time wasi:nn computes ran past their deadline before they stopped (at most one node's cost each)",
            None,
            MetricType::Counter,
        )?;
        let seconds = OVERRUN_MICROS.load(Ordering::Relaxed) as f64 / 1e6;
        ConstCounter::new(seconds).encode(metric)?;
        Ok(())
    }
}
