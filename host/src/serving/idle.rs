//! The idle path: a one-item request that finds its model with a free instance and
//! nothing queued runs at once, on the thread that decoded it, instead of going through
//! the batcher's turn and two thread hand-offs (to an instance thread and back), which
//! at low load cost more than the plugins' own work.
//!
//! What keeps the batcher's guarantees:
//! - **Only when idle**: no other request of the model is in flight, its requests have
//!   lately come further apart than its runs on this path take (a model whose requests
//!   come faster than it could run them one by one is loaded, even when the edge, not the
//!   model, is the bottleneck and it looks idle at each instant), nothing is queued or
//!   waiting to be re-run, every instance is idle (the batcher, which waits for work
//!   before it takes an instance, holds none), and the model does not wait for fuller
//!   batches (`max_queue_delay` zero). Under load its requests queue and batch as before.
//!   (Measured: taking a free instance whenever nothing was queued cost 28-36 % of
//!   requests/s at concurrency 16-64, and whenever every instance was idle 7-13 %: lone
//!   batches of one, each far costlier per item than a batch.)
//! - **Deadlines**: the request must have time for every stage's call limit (a one-item
//!   run calls each stage at most once: re-runs are handed back to the batcher, and a
//!   trapped instance is replaced after the answer, off the request's path), so it is
//!   answered by its deadline as a queued one is; otherwise it queues, and is answered
//!   at its deadline whatever the plugin does.
//! - **Fairness**: the job runs on the runtime thread itself, so at most one runtime
//!   thread fewer than the runtime has may be running one at a time, server-wide
//!   ([`InlineSlots`]): the others go on serving the edge, whatever those calls do until
//!   their deadlines. A call that waits in a host call hands its thread's place in the
//!   runtime to another before it parks (`block_in_place`, see
//!   `runtime::deadline::within`), so the runtime's timer and sockets stay driven; every
//!   call doing so up front measured as costly as the hand-offs this path saves. A runtime
//!   with one thread (or a current-thread one) never takes this path.
//! - **Traps and drain**: the job is the batcher's job (`instances::run_job`): same
//!   bisection, answers and statistics; the request holds its model version until it is
//!   answered, so a drain waits for it as for a queued one.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::{Handle, RuntimeFlavor};
use tokio::sync::{oneshot, Semaphore};
use tokio::time::Instant;

use super::batcher::BatcherHandle;
use super::instances::{run_job, BatcherLink, JobItem};
use super::pool::InstanceCount;
use super::pool::InstancePool;
use super::stats::ModelStats;
use crate::model::outcome::ItemOutcome;
use crate::model::tensor::Item;
use crate::model::StageKind;
use crate::traces::ItemsTrace;

/// What a request needs to run on a model's free instance itself.
pub struct IdleModel {
    /// The model's idle permits (shared with the batcher).
    pub idle: Arc<Semaphore>,
    pub pool: Arc<InstancePool>,
    pub link: BatcherLink,
    pub stats: Arc<ModelStats>,
    /// Whether the model may take lone requests here at all (it does not wait for
    /// fuller batches).
    pub enabled: bool,
    /// The longest a one-item run may take: every stage's call limit.
    pub longest_run: Duration,
}

/// A model's idle path: its [`IdleModel`] and the load signals that open and close it.
pub struct IdlePath {
    model: IdleModel,
    /// The model's requests between [`IdlePath::arrive`] and their answer.
    in_flight: AtomicUsize,
    /// Whether the model's requests come further apart than it runs them.
    pace: Pace,
}

/// A request of the model, counted in flight until it is dropped (answered or abandoned).
pub struct Arrival<'a> {
    in_flight: &'a AtomicUsize,
    /// Whether no other request of the model was in flight when it arrived, and the
    /// previous one arrived long enough before it (see the module's documentation).
    alone: bool,
}

impl Drop for Arrival<'_> {
    fn drop(&mut self) {
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl IdlePath {
    pub fn new(model: IdleModel) -> Self {
        Self {
            model,
            in_flight: AtomicUsize::new(0),
            pace: Pace::new(),
        }
    }

    /// Counts a request of the model in flight, until the returned value is dropped.
    pub fn arrive(&self) -> Arrival<'_> {
        let before = self.in_flight.fetch_add(1, Ordering::AcqRel);
        let quiet = self.pace.arrive(self.pace.now());
        Arrival {
            in_flight: &self.in_flight,
            alone: before == 0 && quiet,
        }
    }

    /// Runs `items` now if the path is open to them (see the module's documentation),
    /// answering them before it returns; gives them back otherwise, to be queued.
    pub fn try_run(
        &self,
        arrival: &Arrival<'_>,
        batcher: &BatcherHandle,
        items: Vec<Item>,
        deadline: Instant,
        trace: &Option<Arc<ItemsTrace>>,
    ) -> Result<Vec<oneshot::Receiver<ItemOutcome>>, Vec<Item>> {
        let open = self.model.enabled
            && arrival.alone
            && items.len() == 1
            && self.model.idle.available_permits() == self.model.pool.live()
            && deadline.saturating_duration_since(Instant::now()) >= self.model.longest_run
            && batcher.is_empty();
        if !open {
            return Err(items);
        }
        let Some(_slot) = InlineSlots::take() else {
            return Err(items);
        };
        let Ok(permit) = self.model.idle.clone().try_acquire_owned() else {
            return Err(items);
        };
        let Some(mut instance) = self.model.pool.take() else {
            return Err(items);
        };
        let request = batcher.next_request();
        let deadline = deadline.into_std();
        let mut receivers = Vec::with_capacity(items.len());
        let items: Vec<JobItem> = items
            .into_iter()
            .map(|item| {
                let (reply, receiver) = oneshot::channel();
                receivers.push(receiver);
                self.model.stats.record_queue_wait(Duration::ZERO);
                JobItem {
                    item,
                    reply,
                    request,
                    deadline,
                    trace: trace.clone(),
                }
            })
            .collect();
        instance.replace_at_once(false);
        let started = self.pace.now();
        crate::runtime::on_this_runtime_thread(|| {
            run_job(
                &mut instance,
                (items, StageKind::Preprocess, false),
                &self.model.link,
                &self.model.stats,
            )
        });
        self.pace.ran(self.pace.now().saturating_sub(started));
        instance.replace_at_once(true);
        if instance.is_whole() {
            self.model.pool.put(instance);
            drop(permit);
        } else {
            // A stage trapped: its replacement (the plugin's `init`, up to its own limit)
            // is built off the request's path, the instance kept from others meanwhile.
            let (pool, stats) = (self.model.pool.clone(), self.model.stats.clone());
            tokio::task::spawn_blocking(move || {
                instance.repair(&stats);
                pool.put(instance);
                drop(permit);
            });
        }
        Ok(receivers)
    }
}

/// A model's pace on this path: the time between its requests and the time a run takes,
/// a moving average of each, in nanoseconds (a load signal the instant state cannot give:
/// at high concurrency the edge is the bottleneck and the model looks idle at most
/// instants, yet each lone run is a batch of one).
struct Pace {
    /// The origin of the nanosecond counts.
    epoch: std::time::Instant,
    /// When the model's latest request arrived.
    latest_arrival: AtomicU64,
    arrival_gap: MovingAverage,
    run_time: MovingAverage,
}

impl Pace {
    fn new() -> Self {
        Self {
            epoch: std::time::Instant::now(),
            latest_arrival: AtomicU64::new(0),
            arrival_gap: MovingAverage::new(MovingAverage::CEILING),
            run_time: MovingAverage::new(0),
        }
    }

    /// Nanoseconds since the epoch.
    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Counts a request arriving at `now`; whether requests lately come further apart
    /// than runs take.
    fn arrive(&self, now: u64) -> bool {
        let previous = self.latest_arrival.swap(now, Ordering::AcqRel);
        self.arrival_gap.record(now.saturating_sub(previous)) >= self.run_time.get()
    }

    /// Counts a run that took `nanos`.
    fn ran(&self, nanos: u64) {
        self.run_time.record(nanos);
    }
}

/// An exponential moving average of nanosecond durations (each sample weighs 1/8), kept
/// without a lock: concurrent updates may lose a sample, which a load signal can afford.
struct MovingAverage(AtomicU64);

impl MovingAverage {
    /// Samples are cut to this (a second): one long pause reopens the path at once, and
    /// the sums cannot overflow.
    const CEILING: u64 = 1_000_000_000;

    fn new(start: u64) -> Self {
        Self(AtomicU64::new(start))
    }

    fn get(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    /// Adds a sample and returns the new average.
    fn record(&self, sample: u64) -> u64 {
        let old = self.get();
        let new = old - old / 8 + sample.min(Self::CEILING) / 8;
        self.0.store(new, Ordering::Release);
        new
    }
}

/// Runtime threads running an idle-path job now, server-wide.
static INLINE_RUNS: AtomicUsize = AtomicUsize::new(0);

/// One of the runtime's threads running an idle-path job: at most all of them but one.
struct InlineSlots;

impl InlineSlots {
    /// A slot, if this is a thread of a multi-thread runtime and one is free.
    fn take() -> Option<InlineSlots> {
        let handle = Handle::try_current().ok()?;
        if handle.runtime_flavor() != RuntimeFlavor::MultiThread {
            return None;
        }
        let limit = handle.metrics().num_workers().saturating_sub(1);
        INLINE_RUNS
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |running| {
                (running < limit).then_some(running + 1)
            })
            .ok()
            .map(|_| InlineSlots)
    }
}

impl Drop for InlineSlots {
    fn drop(&mut self) {
        INLINE_RUNS.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::{MovingAverage, Pace};

    #[test]
    fn requests_faster_than_runs_close_the_path_and_a_pause_reopens_it() {
        let pace = Pace::new();
        let mut now = 1_000_000;
        assert!(pace.arrive(now), "the first request finds the model quiet");
        // Lone at c = 1: a 20 µs run, the next request 90 µs later.
        for _ in 0..64 {
            pace.ran(20_000);
            now += 90_000;
            assert!(pace.arrive(now));
        }
        // Loaded: requests every 16 µs (each alone at its instant), runs of 20 µs. The
        // averages take a few dozen requests to cross, then the path stays closed.
        let mut loaded = |count: usize| {
            (0..count)
                .filter(|_| {
                    pace.ran(20_000);
                    now += 16_000;
                    pace.arrive(now)
                })
                .count()
        };
        let opened = loaded(64);
        assert!(
            opened <= 32,
            "the path stayed open for {opened} of the first 64 loaded requests"
        );
        let opened = loaded(256);
        assert_eq!(opened, 0, "the path opened to {opened} of 256 later loaded requests");
        // One pause of 10 ms: the next request runs at once again.
        assert!(pace.arrive(now + 10_000_000));
    }

    #[test]
    fn the_average_follows_its_samples_and_a_long_pause_lifts_it_at_once() {
        let average = MovingAverage::new(0);
        for _ in 0..64 {
            average.record(16_000);
        }
        assert!((15_000..=16_000).contains(&average.get()), "{}", average.get());
        // One pause of a minute counts as a second: the gap is far above any run again.
        let after_pause = average.record(60_000_000_000);
        assert!(after_pause >= MovingAverage::CEILING / 8, "{after_pause}");
        assert!(after_pause < MovingAverage::CEILING);
    }
}
