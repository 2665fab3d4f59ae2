//! Counters of one model version, read by metrics and by tests that prove batching.

use std::sync::atomic::{AtomicU64, Ordering};

/// Monotonic counters; relaxed atomics, read as a consistent-enough snapshot.
#[derive(Debug, Default)]
pub struct ModelStats {
    /// Batches handed to instances.
    pub batches: AtomicU64,
    /// Items in those batches.
    pub items: AtomicU64,
    /// Items dropped before running because their client had gone.
    pub items_abandoned: AtomicU64,
    /// Stage calls that trapped (each replaced its instance).
    pub traps: AtomicU64,
    /// Items that ended in success.
    pub items_ok: AtomicU64,
    /// Items that ended in an error.
    pub items_failed: AtomicU64,
    /// Pipeline instances whose every stage is live (replacements included).
    pub instances_live: AtomicU64,
}

/// A plain copy of [`ModelStats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct StatsSnapshot {
    pub batches: u64,
    pub items: u64,
    pub items_abandoned: u64,
    pub traps: u64,
    pub items_ok: u64,
    pub items_failed: u64,
    pub instances_live: u64,
}

impl ModelStats {
    pub fn snapshot(&self) -> StatsSnapshot {
        let read = |c: &AtomicU64| c.load(Ordering::Relaxed);
        StatsSnapshot {
            batches: read(&self.batches),
            items: read(&self.items),
            items_abandoned: read(&self.items_abandoned),
            traps: read(&self.traps),
            items_ok: read(&self.items_ok),
            items_failed: read(&self.items_failed),
            instances_live: read(&self.instances_live),
        }
    }
}
