//! Which models are resident (their instances live) and which wait on standby, and what
//! resident models may hold: the residency policy, the memory budget's bookkeeping, and
//! the counters an operator reads it by.
//!
//! Under on-demand residency a model is indexed at start (its `model.toml` validated) and
//! loaded by its first request; the least recently used models with nothing in flight go
//! back to standby when a load needs room under the budget, and idle models go after
//! their idle time. What a model holds is measured (`runtime::ModelShared::held_bytes`),
//! never estimated, except for a model never loaded yet, whose load reserves its stage
//! files' size until it is measured.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;

use crate::model::config::ModelConfig;

/// Which models the server keeps resident.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ResidencyMode {
    /// Every model is loaded at start and stays loaded (until unloaded or removed).
    #[default]
    Resident,
    /// Models are indexed at start and loaded by their first request; idle ones and the
    /// least recently used under the memory budget go back to standby.
    OnDemand,
}

/// How the repository keeps models resident.
#[derive(Clone, Copy, Debug)]
pub struct ResidencyPolicy {
    pub mode: ResidencyMode,
    /// What resident models may hold together, measured; `None`: no bound.
    pub budget_bytes: Option<u64>,
    /// A model used (or loaded) more recently than this is not evicted for room.
    pub min_residency: Duration,
    /// ... nor one used within this many of its own load times, if that is shorter.
    pub min_residency_loads: u32,
    /// A model idle this long goes back to standby (on demand only); `None`: never.
    pub idle_unload: Option<Duration>,
    /// An instance above its model's floor idle this long is let go.
    pub instance_idle: Duration,
}

impl Default for ResidencyPolicy {
    fn default() -> Self {
        Self {
            mode: ResidencyMode::Resident,
            budget_bytes: None,
            min_residency: Duration::from_secs(30),
            min_residency_loads: 4,
            idle_unload: None,
            instance_idle: Duration::from_secs(30),
        }
    }
}

impl ResidencyPolicy {
    pub fn on_demand(&self) -> bool {
        self.mode == ResidencyMode::OnDemand
    }

    /// The instances a model with these limits keeps however idle it is: its
    /// `min_instances`, else one on demand and all of them when every model is resident.
    pub fn instance_floor(&self, limits: &crate::model::config::Limits) -> usize {
        limits
            .min_instances
            .unwrap_or(if self.on_demand() { 1 } else { limits.instances })
            .min(limits.instances)
    }
}

/// Milliseconds on a clock that starts with the process: what a model's last use is
/// kept as (one atomic store per request).
pub fn clock_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    let start = *START.get_or_init(Instant::now);
    u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// When a resident model was last used (the arrival of its latest request, or its load),
/// and whether a request has found it resident since its load: a model asked for again is
/// in use, one only its loading requests asked for may be a one-off.
#[derive(Debug)]
pub struct LastUse {
    at_ms: AtomicU64,
    reused: AtomicBool,
}

impl LastUse {
    pub fn now() -> Self {
        Self {
            at_ms: AtomicU64::new(clock_ms()),
            reused: AtomicBool::new(false),
        }
    }

    /// A request found the model resident.
    pub fn touch(&self) {
        self.at_ms.store(clock_ms(), Ordering::Relaxed);
        if !self.reused.load(Ordering::Relaxed) {
            self.reused.store(true, Ordering::Relaxed);
        }
    }

    /// A request that waited for the model's load is served by it.
    pub fn touch_by_its_load(&self) {
        self.at_ms.store(clock_ms(), Ordering::Relaxed);
    }

    /// How long ago, on the residency clock.
    pub fn ago(&self) -> Duration {
        Duration::from_millis(clock_ms().saturating_sub(self.at_ms.load(Ordering::Relaxed)))
    }

    /// Whether a request found the model resident since its load.
    pub fn reused(&self) -> bool {
        self.reused.load(Ordering::Relaxed)
    }
}

/// Compiled code per byte of a stage's file, to reserve room for a model never loaded:
/// cranelift's image of the Rust digits predict stage is 2.8 times its file.
/// An over-estimate costs a first load only (what it then measures is reserved next time);
/// an under-estimate lets the first loads of a storm pass the budget until the enforcer
/// catches up.
const COMPILED_PER_WASM_BYTE: u64 = 3;

/// A model known, validated and servable, with nothing loaded: its next request loads it.
#[derive(Debug)]
pub struct Standby {
    pub config: ModelConfig,
    /// What it held once loaded when it was last resident: the room its next load makes.
    pub held_bytes: Option<u64>,
    /// What its plugins declared when it was last resident (its metadata meanwhile).
    pub metadata: BTreeMap<String, String>,
}

impl Standby {
    pub fn new(config: ModelConfig) -> Self {
        Self {
            config,
            held_bytes: None,
            metadata: BTreeMap::new(),
        }
    }

    /// The room a load of it makes under the budget: what it held last time, else (never
    /// measured) what each of the instances it starts with declares it holds at
    /// instantiation, and its
    /// stages' compiled code by their files' size (see [`COMPILED_PER_WASM_BYTE`]), and
    /// its graph files. Reads its files: call it off
    /// the async workers.
    pub fn expected_bytes(&self, starting_instances: usize) -> u64 {
        if let Some(held) = self.held_bytes {
            return held;
        }
        let instances = starting_instances.max(1) as u64;
        let stages = self.config.stages.iter().map(|(_, file)| file).filter_map(|file| {
            let len = std::fs::metadata(file).ok()?.len();
            let declared = crate::runtime::declared_instance_bytes_of_file(file).unwrap_or(0);
            let code = len.saturating_mul(COMPILED_PER_WASM_BYTE);
            Some(code.saturating_add(declared.saturating_mul(instances)))
        });
        let graphs = self
            .config
            .graphs
            .iter()
            .filter_map(|graph| std::fs::metadata(&graph.file).ok())
            .map(|meta| meta.len());
        stages.chain(graphs).fold(0, u64::saturating_add)
    }
}

/// Where an on-demand load stands, for the requests waiting on it.
#[derive(Clone, Copy, Debug)]
pub enum LoadProgress {
    /// Waiting for its model's turn (another change of it under way).
    Queued,
    /// Waiting for room under the memory budget.
    WaitingForRoom,
    /// Compiling (from the cache) and initialising.
    Loading,
    /// Over: the model is resident, failed, or (nobody waited any more) still on standby;
    /// with its times when it loaded.
    Done(Option<LoadTimes>),
}

impl LoadProgress {
    /// Whether the load has yet to end.
    pub fn under_way(self) -> bool {
        !matches!(self, LoadProgress::Done(_))
    }

    /// What a load that has not begun waits for, as the repository index says it.
    pub fn waiting_for(self) -> Option<&'static str> {
        match self {
            LoadProgress::Queued => Some("waiting for its turn to load"),
            LoadProgress::WaitingForRoom => Some("waiting for room in the memory budget"),
            LoadProgress::Loading | LoadProgress::Done(_) => None,
        }
    }
}

/// A load under way, as its waiters follow it.
pub type OnDemandLoad = tokio::sync::watch::Receiver<LoadProgress>;

/// The memory budget's reservations: room promised to loads under way, on top of what
/// resident models are measured to hold.
#[derive(Debug, Default)]
pub struct Reservations {
    reserved: Mutex<u64>,
}

/// Room held for one load until it is measured (given back when dropped).
#[must_use]
pub struct Reservation<'a> {
    reservations: &'a Reservations,
    bytes: u64,
}

impl Reservations {
    /// Reserves `bytes` if they fit under `budget` beside what is resident and what is
    /// already reserved. `resident` is read under the lock: a load that ends meanwhile
    /// puts its model in and gives its reservation back only after, so it is counted at
    /// least once (read before the lock, it could be counted in neither).
    pub fn try_reserve(&self, bytes: u64, resident: impl FnOnce() -> u64, budget: u64) -> Option<Reservation<'_>> {
        let mut reserved = self.reserved.lock().unwrap_or_else(PoisonError::into_inner);
        if resident().saturating_add(*reserved).saturating_add(bytes) > budget {
            return None;
        }
        *reserved += bytes;
        Some(Reservation {
            reservations: self,
            bytes,
        })
    }

    /// What loads under way have reserved.
    pub fn reserved(&self) -> u64 {
        *self.reserved.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let mut reserved = self
            .reservations
            .reserved
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *reserved = reserved.saturating_sub(self.bytes);
    }
}

/// Memory that evicted models hold until their drop, which waits for a loader thread
/// (behind loads): counted against the budget when a load asks for room, so that new
/// loads do not pile up on memory not given back yet, and waited for, not evicted for
/// again (a storm of cold loads on a starved machine once peaked at 245 MiB under a
/// 64 MiB budget).
#[derive(Debug, Default)]
pub struct Releases {
    bytes: AtomicU64,
    /// Woken when a release ends.
    pub done: tokio::sync::Notify,
}

/// A value on its way to be dropped, counted in its [`Releases`] until it is.
pub struct Releasing<T> {
    value: Option<T>,
    bytes: u64,
    releases: std::sync::Arc<Releases>,
}

impl Releases {
    /// What values on their way to be dropped hold.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Acquire)
    }

    /// Counts `bytes` until the returned value is dropped.
    pub fn start<T>(self: &std::sync::Arc<Self>, value: T, bytes: u64) -> Releasing<T> {
        self.bytes.fetch_add(bytes, Ordering::AcqRel);
        Releasing {
            value: Some(value),
            bytes,
            releases: self.clone(),
        }
    }
}

impl<T> Drop for Releasing<T> {
    fn drop(&mut self) {
        drop(self.value.take());
        self.releases.bytes.fetch_sub(self.bytes, Ordering::AcqRel);
        self.releases.done.notify_waiters();
    }
}

/// What made a model load.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct LoadTrigger {
    /// `startup`, `request` (its first request, on demand), `api` (the repository API),
    /// `reload` (its folder changed).
    pub trigger: &'static str,
}

pub const STARTUP: LoadTrigger = LoadTrigger { trigger: "startup" };
pub const REQUEST: LoadTrigger = LoadTrigger { trigger: "request" };
pub const API: LoadTrigger = LoadTrigger { trigger: "api" };
pub const RELOAD: LoadTrigger = LoadTrigger { trigger: "reload" };

/// The labels of `tensorplug_residency_loads_total`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct LoadLabels {
    pub trigger: &'static str,
    /// Whether any stage was compiled (`true`), all came from the cache or a loaded stage
    /// (`false`), or the cache's counters could not tell (`unknown`); `none` when it failed.
    pub compiled: &'static str,
    /// `ready` or `failed`.
    pub outcome: &'static str,
}

/// Why a model went back to standby.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct EvictionCause {
    /// `budget` (room for another model), `idle` (unused past its idle time), `api` (the
    /// repository API unloaded it).
    pub cause: &'static str,
}

pub const FOR_ROOM: EvictionCause = EvictionCause { cause: "budget" };
pub const IDLE: EvictionCause = EvictionCause { cause: "idle" };
pub const UNLOADED: EvictionCause = EvictionCause { cause: "api" };

/// The part of a cold start (a request that found its model on standby).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ColdPhase {
    /// `waiting` (for its turn among the loads, room under the budget, or another change of
    /// the model), `loading` (compile from the cache and init), `serving` (the request once
    /// its model was resident), `total` (arrival to answer).
    pub phase: &'static str,
}

/// Cold starts take from a millisecond (a small Rust model, cache warm) to seconds (a
/// compile).
const COLD_START_BUCKETS: [f64; 18] = [
    0.001, 0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0,
];

/// The residency counters, server-wide (none per model: a node may know thousands).
#[derive(Debug)]
pub struct ResidencyMetrics {
    pub loads: Family<LoadLabels, Counter>,
    pub evictions: Family<EvictionCause, Counter>,
    /// Loads that had to wait for room under the budget.
    pub budget_waits: Counter,
    /// Requests answered 503 because their model could not be made resident in time.
    pub unavailable: Counter,
    pub cold_starts: Family<ColdPhase, Histogram>,
}

impl Default for ResidencyMetrics {
    fn default() -> Self {
        // Every cause from zero: a series that appears only with its first eviction is
        // missed by a rate over it, and by an alert.
        let evictions = Family::default();
        for cause in [FOR_ROOM, IDLE, UNLOADED] {
            let _ = evictions.get_or_create(&cause);
        }
        Self {
            loads: Family::default(),
            evictions,
            budget_waits: Counter::default(),
            unavailable: Counter::default(),
            cold_starts: Family::new_with_constructor(|| Histogram::new(COLD_START_BUCKETS)),
        }
    }
}

/// How one on-demand load went, for the requests that waited on it.
#[derive(Clone, Copy, Debug)]
pub struct LoadTimes {
    /// When it began loading (room found, the model's turn come).
    pub started: Instant,
    /// When it was resident (or failed).
    pub finished: Instant,
}

impl ResidencyMetrics {
    /// Counts a cold start that arrived at `arrived`, waited on `load`, and was answered
    /// now.
    pub fn cold_start(&self, arrived: Instant, load: LoadTimes) {
        let now = Instant::now();
        let began = load.started.max(arrived);
        let resident = load.finished.max(arrived);
        let phases = [
            ("waiting", began.saturating_duration_since(arrived)),
            ("loading", resident.saturating_duration_since(began)),
            ("serving", now.saturating_duration_since(resident)),
            ("total", now.saturating_duration_since(arrived)),
        ];
        for (phase, took) in phases {
            self.cold_starts
                .get_or_create(&ColdPhase { phase })
                .observe(took.as_secs_f64());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_hold_room_until_dropped() {
        let reservations = Reservations::default();
        let first = reservations.try_reserve(60, || 30, 100).expect("fits");
        assert!(reservations.try_reserve(20, || 30, 100).is_none(), "30 + 60 + 20 > 100");
        assert_eq!(reservations.reserved(), 60);
        drop(first);
        assert!(reservations.try_reserve(20, || 30, 100).is_some());
        assert_eq!(reservations.reserved(), 0, "the second was dropped at once");
    }

    #[tokio::test]
    async fn a_release_counts_until_its_value_is_dropped_and_wakes_who_waits() {
        struct Unmapped(std::sync::mpsc::Sender<u64>, std::sync::Arc<Releases>);
        impl Drop for Unmapped {
            fn drop(&mut self) {
                // Still counted while the value itself is dropped.
                let _ = self.0.send(self.1.bytes());
            }
        }
        let releases = std::sync::Arc::new(Releases::default());
        let (sender, during_drop) = std::sync::mpsc::channel();
        let first = releases.start(Unmapped(sender.clone(), releases.clone()), 40);
        let second = releases.start(Unmapped(sender, releases.clone()), 2);
        assert_eq!(releases.bytes(), 42);
        let released = releases.done.notified();
        tokio::pin!(released);
        released.as_mut().enable();
        std::thread::spawn(move || drop(first)).join().unwrap();
        assert_eq!(during_drop.recv().unwrap(), 42);
        assert_eq!(releases.bytes(), 2);
        tokio::time::timeout(Duration::from_secs(5), released)
            .await
            .expect("woken");
        drop(second);
        assert_eq!(releases.bytes(), 0);
    }

    #[test]
    fn a_cold_start_is_split_at_the_load_it_waited_for() {
        let metrics = ResidencyMetrics::default();
        let arrived = Instant::now();
        let load = LoadTimes {
            started: arrived + Duration::from_millis(5),
            finished: arrived + Duration::from_millis(8),
        };
        metrics.cold_start(arrived, load);
        for phase in ["waiting", "loading", "serving", "total"] {
            let histogram = metrics.cold_starts.get_or_create(&ColdPhase { phase });
            let mut text = String::new();
            let mut registry = prometheus_client::registry::Registry::default();
            registry.register("h", "h", histogram.clone());
            prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
            assert!(text.contains("h_count 1"), "{phase}: {text}");
        }
    }
}
