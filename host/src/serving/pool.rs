//! A model version's idle instances ([`InstancePool`]), and how many it has: instances
//! that follow the load. Its instance count moves between its
//! floor (`limits.min_instances`, 0 allowed) and its ceiling (`limits.instances`). The
//! batcher asks for one more whenever work waits and every instance is busy; one is made
//! at a time, off the async workers, and only if the memory budget has room for it (the
//! repository may evict idle models for it). An instance idle past the idle time goes,
//! one per look, down to the floor (to none: the model stays resident and ready, and its
//! next request makes one).
//!
//! The idle permits stay as many as the instances: a new one adds its permit once it is
//! in the pool; one that goes takes an idle permit with it (forgotten). Both happen under
//! the pool's lock, as does the batcher's last count before it drains, so the drain waits
//! for exactly the instances there are.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::stats::ModelStats;
use crate::pipeline::{PipelineInstance, PipelineTemplate};
use crate::runtime::ModelShared;

/// A pipeline instance while it is not running, whether it is whole (every stage
/// live: what `instances_live` counts), and since when it has been idle.
pub struct Pooled {
    pub(super) pipeline: PipelineInstance,
    whole: bool,
    idle_since: std::time::Instant,
}

impl Pooled {
    fn new(pipeline: PipelineInstance) -> Self {
        Self {
            pipeline,
            whole: true,
            idle_since: std::time::Instant::now(),
        }
    }

    /// Whether a trapped stage instance is replaced at once (see
    /// [`PipelineInstance::replace_at_once`]).
    pub fn replace_at_once(&mut self, at_once: bool) {
        self.pipeline.replace_at_once(at_once);
    }

    pub fn is_whole(&self) -> bool {
        self.whole
    }

    /// Re-creates every stage instance a trap left out, counting it live again.
    pub fn repair(&mut self, stats: &ModelStats) {
        self.pipeline.repair();
        self.count_whole(stats);
    }

    /// Brings `whole`, and `instances_live` with it, up to date with the pipeline.
    pub(super) fn count_whole(&mut self, stats: &ModelStats) {
        let whole = self.pipeline.is_whole();
        if self.whole == whole {
            return;
        }
        self.whole = whole;
        if whole {
            stats.instances_live.fetch_add(1, Ordering::Relaxed);
        } else {
            stats.instances_live.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// A model version's idle instances, and how many it has (it starts more while requests
/// wait, and lets idle ones go). Whoever holds one of the model's idle
/// permits (`Job::instance`, or the idle path's) may take one instance and puts it back
/// before letting the permit go, so a holder always finds one: the permits are as many
/// as the instances.
pub struct InstancePool {
    idle: std::sync::Mutex<Vec<Pooled>>,
    stats: Arc<ModelStats>,
    /// One per idle instance: the batcher's and the idle path's way to take one.
    permits: Arc<tokio::sync::Semaphore>,
    scaling: Scaling,
}

impl InstancePool {
    pub fn new(instances: Vec<PipelineInstance>, stats: Arc<ModelStats>, scaling: Scaling) -> Self {
        stats
            .instances_live
            .fetch_add(instances.len() as u64, Ordering::Relaxed);
        scaling.started_with(instances.len());
        Self {
            permits: Arc::new(tokio::sync::Semaphore::new(instances.len())),
            idle: std::sync::Mutex::new(instances.into_iter().map(Pooled::new).collect()),
            stats,
            scaling,
        }
    }

    /// The model's idle permits, one per idle instance.
    pub fn permits(&self) -> &Arc<tokio::sync::Semaphore> {
        &self.permits
    }

    /// An idle instance (there is one for every idle permit).
    pub fn take(&self) -> Option<Pooled> {
        crate::sync::lock(&self.idle).pop()
    }

    pub fn put(&self, mut instance: Pooled) {
        instance.idle_since = std::time::Instant::now();
        crate::sync::lock(&self.idle).push(instance);
    }
}

impl Drop for InstancePool {
    fn drop(&mut self) {
        let idle = self.idle.get_mut().unwrap_or_else(|poisoned| poisoned.into_inner());
        let whole = idle.iter().filter(|instance| instance.whole).count();
        self.stats.instances_live.fetch_sub(whole as u64, Ordering::Relaxed);
        // The last holder of an evicted model's pool is often its batcher's task, ending
        // on a runtime thread (measured: 8 % of the unmappings of a storm of cold loads
        // were there).
        if !idle.is_empty() {
            super::loaders::drop_off_serving_threads(std::mem::take(idle));
        }
    }
}

/// Asks whether `bytes` more may be held under the memory budget (evicting idle models
/// for them if need be).
pub type Room = Arc<dyn Fn(u64) -> bool + Send + Sync>;

/// What the repository decides of a version's instance count: its floor (what it starts
/// with, at least one), the idle time, and the budget's say.
pub struct Growth {
    pub floor: usize,
    pub idle_after: Duration,
    pub room: Option<Room>,
}

/// How a model version's instance count may move, and what it moves with.
pub struct Scaling {
    pub template: Arc<PipelineTemplate>,
    /// Fewest instances kept however idle the model is.
    pub floor: usize,
    /// Most instances (`limits.instances`).
    pub ceiling: usize,
    /// How long an instance above the floor may stay idle.
    pub idle_after: Duration,
    /// What one more instance is expected to hold (what one held at the load, measured).
    pub instance_bytes: u64,
    /// The budget's say on one more; `None`: no budget.
    pub room: Option<Room>,
    /// What the version's instances hold, measured.
    pub shared: Arc<ModelShared>,
    live: AtomicUsize,
    growing: AtomicBool,
    /// Set when the batcher drains: the count holds still from then on.
    draining: AtomicBool,
}

impl Scaling {
    pub fn new(
        (template, shared): (Arc<PipelineTemplate>, Arc<ModelShared>),
        (floor, ceiling): (usize, usize),
        idle_after: Duration,
    ) -> Self {
        Self {
            template,
            shared,
            floor: floor.min(ceiling),
            ceiling,
            idle_after,
            instance_bytes: 0,
            room: None,
            live: AtomicUsize::new(0),
            growing: AtomicBool::new(false),
            draining: AtomicBool::new(false),
        }
    }

    pub(super) fn started_with(&self, instances: usize) {
        self.live.store(instances, Ordering::Release);
    }
}

/// What the batcher needs of the instance count.
pub trait InstanceCount: Send + Sync {
    /// The instances there are now.
    fn live(&self) -> usize;
    /// Work waits and no instance is idle: one more, if the model may have it.
    fn wanted(self: Arc<Self>);
    /// The queue drains: the count holds still from now on; what it is.
    fn hold_for_drain(&self) -> usize;
}

impl InstanceCount for InstancePool {
    fn live(&self) -> usize {
        self.scaling.live.load(Ordering::Acquire)
    }

    fn wanted(self: Arc<Self>) {
        let scaling = &self.scaling;
        if scaling.draining.load(Ordering::Acquire)
            || self.live() >= scaling.ceiling
            || scaling.growing.swap(true, Ordering::AcqRel)
        {
            return;
        }
        let pool = self.clone();
        // Instantiating runs plugins' `init`: off the async workers, on a loader thread.
        super::loaders::spawn(move || {
            // Cleared even if `init` panics.
            struct Grown(Arc<InstancePool>);
            impl Drop for Grown {
                fn drop(&mut self) {
                    self.0.scaling.growing.store(false, Ordering::Release);
                }
            }
            let pool = Grown(pool);
            pool.0.grow();
        });
    }

    fn hold_for_drain(&self) -> usize {
        let _idle = crate::sync::lock(&self.idle);
        self.scaling.draining.store(true, Ordering::Release);
        self.live()
    }
}

impl InstancePool {
    /// Makes one more instance if the budget has room for it, and puts it in the pool.
    fn grow(&self) {
        let scaling = &self.scaling;
        if let Some(room) = &scaling.room {
            // Instances being replaced after a trap hold nothing for a moment: count every
            // live one as at least a typical instance, so that the budget still holds once
            // they are back.
            let counted = scaling.shared.memory.bytes() as u64;
            let expected = scaling.instance_bytes.saturating_mul(self.live() as u64);
            let more = scaling.instance_bytes.saturating_add(expected.saturating_sub(counted));
            if !room(more) {
                tracing::debug!("no instance added: the memory budget has no room for one");
                return;
            }
        }
        let pipeline = match scaling.template.instantiate() {
            Ok(pipeline) => pipeline,
            Err(e) => {
                tracing::warn!("cannot start another instance: {e}");
                return;
            }
        };
        let mut idle = crate::sync::lock(&self.idle);
        if scaling.draining.load(Ordering::Acquire) {
            return; // nobody will take it: the version is going
        }
        idle.push(Pooled::new(pipeline));
        let live = scaling.live.fetch_add(1, Ordering::AcqRel) + 1;
        self.stats.instances_live.fetch_add(1, Ordering::Relaxed);
        self.permits.add_permits(1);
        drop(idle);
        tracing::debug!(instances = live, "instance added: requests waited for one");
    }

    /// Lets the instance idle longest go if it has been idle past the idle time and the
    /// model has more than its floor; whether one went.
    pub fn shrink_idle(&self) -> bool {
        let scaling = &self.scaling;
        let mut idle = crate::sync::lock(&self.idle);
        if scaling.draining.load(Ordering::Acquire) || self.live() <= scaling.floor {
            return false;
        }
        let Some((oldest, _)) = idle.iter().enumerate().min_by_key(|(_, pooled)| pooled.idle_since) else {
            return false;
        };
        if idle[oldest].idle_since.elapsed() < scaling.idle_after {
            return false;
        }
        // Its permit: one is free for every instance in the pool.
        let Ok(permit) = self.permits.try_acquire() else {
            return false;
        };
        permit.forget();
        let gone = idle.swap_remove(oldest);
        let live = scaling.live.fetch_sub(1, Ordering::AcqRel) - 1;
        if gone.is_whole() {
            self.stats.instances_live.fetch_sub(1, Ordering::Relaxed);
        }
        drop(idle);
        super::loaders::drop_off_serving_threads(gone);
        tracing::debug!(instances = live, "instance let go: idle");
        true
    }
}
