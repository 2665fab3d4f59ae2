//! The dynamic batcher: one actor per model version.
//!
//! [`BatcherHandle`] is the cloneable front door: it admits items (bounded by
//! `max_queue_size`, so overload is an explicit error instead of memory growth) and gives
//! each a oneshot reply channel. The queue task waits for an idle instance, then gathers
//! items until `max_batch_size` or until the first one has waited `max_queue_delay`, and
//! hands the batch to the instance threads. Items whose client has gone are dropped
//! before they cost a plugin call.
//!
//! Waiting for an idle instance *before* gathering is what makes batches grow under load:
//! while every instance is busy, items pile up and the next batch takes them all.
//!
//! Parts of a batch handed back by an instance (re-runs of suspect items after a trap or a
//! time limit, see `pipeline::bisect`) wait here too, and share the instances fairly with
//! fresh items: a free instance takes fresh items first, but never twice in a row while
//! parts wait, so a fresh client waits for at most one such part (one deadline at most),
//! and parts still progress under load. Among parts, the request with the fewest waiting
//! goes first, so a few suspects of one request are not stuck behind another's many. A
//! part whose request's deadline has passed is dropped, never run.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::handoff;
use super::instances::{keep_wanted, HandedBack, HandedBackParts, Job, JobItem};
use super::pool::InstanceCount;
use super::stats::ModelStats;
use crate::model::outcome::{ItemError, ItemOutcome};
use crate::model::tensor::Item;
use crate::model::StageKind;
use crate::traces::ItemsTrace;

/// An item waiting in the queue.
pub struct QueuedItem {
    pub item: Item,
    pub reply: oneshot::Sender<ItemOutcome>,
    /// The request it came in (items of one request share it).
    pub request: u64,
    /// When its request stops waiting.
    pub deadline: Instant,
    /// When it was queued.
    pub queued_at: Instant,
    /// Its request's trace, when the request is traced.
    pub trace: Option<Arc<ItemsTrace>>,
    /// Holds the item's place in the bounded queue until it is dispatched (dropped
    /// with the rest of the item when it leaves the queue).
    _admission: OwnedSemaphorePermit,
}

impl QueuedItem {
    /// Whether anyone still waits for this item's answer.
    fn wanted(&self, now: Instant) -> bool {
        !self.reply.is_closed() && now < self.deadline
    }
}

/// Why items could not be queued.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum SubmitError {
    #[error("the queue of model '{model}' is full ({capacity} items); retry later")]
    QueueFull { model: String, capacity: usize },
    #[error("model '{model}' is shutting down")]
    Closed { model: String },
}

/// The cloneable sending side of a model's queue.
#[derive(Clone)]
pub struct BatcherHandle {
    model: Arc<str>,
    queue: mpsc::UnboundedSender<QueuedItem>,
    admission: Arc<Semaphore>,
    capacity: usize,
    /// Numbers requests, so that the pipeline can tell one client's items from another's.
    requests: Arc<std::sync::atomic::AtomicU64>,
    /// Parts handed back by the instances and not yet run again.
    parts_pending: Arc<AtomicUsize>,
}

/// Batch-forming settings.
#[derive(Clone, Copy, Debug)]
pub struct BatchPolicy {
    pub max_batch_size: usize,
    pub max_queue_delay: Duration,
    pub max_queue_size: usize,
}

impl BatcherHandle {
    /// Starts the queue task on the current tokio runtime. `idle` holds one permit per
    /// instance (`instances` of them); a dispatched batch carries one until its instance is
    /// done with it. `handed_back`: its end of the link the instance threads hand parts
    /// back through.
    pub fn spawn(
        model: Arc<str>,
        policy: BatchPolicy,
        idle: (Arc<Semaphore>, Arc<dyn InstanceCount>),
        (jobs, handed_back): (handoff::Sender<Job>, HandedBackParts),
        stats: Arc<ModelStats>,
    ) -> Self {
        let (queue, receiver) = mpsc::unbounded_channel();
        let HandedBackParts {
            parts,
            pending: parts_pending,
        } = handed_back;
        let queues = Queues {
            fresh: receiver,
            fresh_open: true,
            held: None,
            parts,
            waiting: Vec::new(),
            parts_pending: parts_pending.clone(),
        };
        tokio::spawn(run_queue(queues, policy, idle, jobs, stats));
        Self {
            model,
            queue,
            admission: Arc::new(Semaphore::new(policy.max_queue_size)),
            capacity: policy.max_queue_size,
            requests: Arc::default(),
            parts_pending,
        }
    }

    /// Items waiting in the queue now.
    pub fn queued(&self) -> usize {
        self.capacity.saturating_sub(self.admission.available_permits())
    }

    /// Whether nothing waits here: no fresh item and no part handed back. A request may
    /// then take a free instance at once rather than queue (`serving::idle`).
    pub fn is_empty(&self) -> bool {
        self.queued() == 0 && self.parts_pending.load(Ordering::Acquire) == 0
    }

    /// A new request's number (what tells one client's items from another's).
    pub fn next_request(&self) -> u64 {
        self.requests.fetch_add(1, Ordering::Relaxed)
    }

    /// Queues every item of one request, or none of them; the request stops waiting at
    /// `deadline`. `trace`: the request's, when it is traced.
    pub fn submit(
        &self,
        items: Vec<Item>,
        deadline: Instant,
        trace: Option<Arc<ItemsTrace>>,
    ) -> Result<Vec<oneshot::Receiver<ItemOutcome>>, SubmitError> {
        let request = self.next_request();
        let full = || SubmitError::QueueFull {
            model: self.model.to_string(),
            capacity: self.capacity,
        };
        let count = u32::try_from(items.len()).map_err(|_| full())?;
        let mut permits = self
            .admission
            .clone()
            .try_acquire_many_owned(count)
            .map_err(|_| full())?;
        let mut receivers = Vec::with_capacity(items.len());
        let queued_at = Instant::now();
        for item in items {
            let (reply, receiver) = oneshot::channel();
            // `split(1)` hands each item its own place; it only fails when none are left,
            // which the count above rules out.
            let admission = permits.split(1).ok_or_else(full)?;
            self.queue
                .send(QueuedItem {
                    item,
                    reply,
                    request,
                    deadline,
                    queued_at,
                    trace: trace.clone(),
                    _admission: admission,
                })
                .map_err(|_| SubmitError::Closed {
                    model: self.model.to_string(),
                })?;
            receivers.push(receiver);
        }
        Ok(receivers)
    }
}

/// What the queue task takes work from.
struct Queues {
    fresh: mpsc::UnboundedReceiver<QueuedItem>,
    /// False once every handle is gone and the fresh queue is drained.
    fresh_open: bool,
    /// A fresh item taken from the queue to learn whether any waits, not yet dispatched.
    held: Option<QueuedItem>,
    parts: mpsc::UnboundedReceiver<HandedBack>,
    /// Parts handed back, waiting for an instance.
    waiting: Vec<HandedBack>,
    /// Parts handed back and not yet dispatched (counted by [`super::instances::BatcherLink::hand_back`]).
    parts_pending: Arc<AtomicUsize>,
}

impl Queues {
    /// Moves every handed-back part that has arrived into `waiting`, and takes a fresh
    /// item into `held` if one waits.
    fn look(&mut self) {
        while let Ok(part) = self.parts.try_recv() {
            self.waiting.push(part);
        }
        if self.held.is_none() && self.fresh_open {
            match self.fresh.try_recv() {
                Ok(item) => self.held = Some(item),
                Err(mpsc::error::TryRecvError::Disconnected) => self.fresh_open = false,
                Err(mpsc::error::TryRecvError::Empty) => {}
            }
        }
    }

    /// The waiting part to run next: of the request with the fewest parts waiting, the
    /// oldest.
    fn next_part(&mut self) -> Option<HandedBack> {
        let request = |part: &HandedBack| part.items.first().map_or(u64::MAX, |item| item.request);
        let mut shares = std::collections::HashMap::<u64, usize>::new();
        for part in &self.waiting {
            *shares.entry(request(part)).or_default() += 1;
        }
        let position = (0..self.waiting.len()).min_by_key(|&i| (shares[&request(&self.waiting[i])], i))?;
        self.parts_pending.fetch_sub(1, Ordering::AcqRel);
        Some(self.waiting.remove(position))
    }
}

async fn run_queue(
    mut queues: Queues,
    policy: BatchPolicy,
    (idle, instances): (Arc<Semaphore>, Arc<dyn InstanceCount>),
    jobs: handoff::Sender<Job>,
    stats: Arc<ModelStats>,
) {
    // Whether a fresh batch was dispatched while parts waited, since a part last ran.
    let mut passed_over = false;
    loop {
        // Work first, then an instance: while the model idles, the queue holds no
        // instance, so a lone request can take one at once (`serving::idle`); while every
        // instance is busy, items pile up here and the next batch takes them all.
        if queues.held.is_none() && queues.waiting.is_empty() {
            if !queues.fresh_open {
                // No fresh item will come. Once every instance is idle no part can be
                // handed back any more: then the queue is done, unless some were.
                let count = u32::try_from(instances.hold_for_drain()).unwrap_or(u32::MAX);
                let Ok(all) = idle.clone().acquire_many_owned(count).await else {
                    return;
                };
                drop(all);
                queues.look();
                if queues.waiting.is_empty() {
                    return; // every handle is gone and the queue is drained
                }
                continue;
            }
            tokio::select! {
                item = queues.fresh.recv() => match item {
                    Some(item) => queues.held = Some(item),
                    None => {
                        queues.fresh_open = false;
                        continue;
                    }
                },
                Some(part) = queues.parts.recv() => queues.waiting.push(part),
            }
        }
        let instance = match idle.clone().try_acquire_owned() {
            Ok(instance) => instance,
            Err(tokio::sync::TryAcquireError::Closed) => return,
            Err(tokio::sync::TryAcquireError::NoPermits) => {
                // Work waits and every instance is busy.
                instances.clone().wanted();
                let Ok(instance) = idle.clone().acquire_owned().await else {
                    return;
                };
                instance
            }
        };
        queues.look();
        if !queues.waiting.is_empty() && (queues.held.is_none() || passed_over) {
            passed_over = false;
            if let Some(part) = queues.next_part() {
                if !dispatch_part(part, instance, &jobs, &stats) {
                    return;
                }
            }
            continue;
        }
        let Some(first) = queues.held.take() else {
            continue; // unreachable: there was a held item or a waiting part
        };
        if !queues.waiting.is_empty() {
            passed_over = true;
        }
        let mut batch = Vec::with_capacity(policy.max_batch_size);
        batch.push(first);
        gather(&mut queues.fresh, &mut batch, &policy).await;

        // Nobody waits for these any more: no plugin call for them.
        let now = Instant::now();
        let (batch, gone): (Vec<QueuedItem>, Vec<QueuedItem>) = batch.into_iter().partition(|q| q.wanted(now));
        if !gone.is_empty() {
            stats.items_abandoned.fetch_add(gone.len() as u64, Ordering::Relaxed);
            for queued in gone {
                let _ = queued.reply.send(Err(ItemError::deadline(
                    "not run: the request's deadline passed while it was queued",
                )));
            }
        }
        if batch.is_empty() {
            continue;
        }
        for queued in &batch {
            stats.record_queue_wait(now.saturating_duration_since(queued.queued_at));
        }
        let items = batch
            .into_iter()
            .map(|queued| JobItem {
                item: queued.item,
                reply: queued.reply,
                request: queued.request,
                deadline: queued.deadline.into_std(),
                trace: queued.trace,
            })
            .collect();
        let job = Job {
            items,
            start: StageKind::Preprocess,
            rerun: false,
            instance,
        };
        if jobs.send(job).is_err() {
            return; // the instances are gone: the model is being torn down
        }
    }
}

/// Sends a handed-back part to the instances, without the items nobody waits for any
/// more (answered 504 here); false once the instances are gone.
fn dispatch_part(
    part: HandedBack,
    instance: OwnedSemaphorePermit,
    jobs: &handoff::Sender<Job>,
    stats: &ModelStats,
) -> bool {
    let items = keep_wanted(
        part.items,
        stats,
        "not re-run: the request's deadline passed while the item waited to be re-run",
    );
    if items.is_empty() {
        return true;
    }
    let job = Job {
        items,
        start: part.stage,
        rerun: true,
        instance,
    };
    jobs.send(job).is_ok()
}

/// Adds queued items to `batch` until it is full or the first item's wait is over.
async fn gather(receiver: &mut mpsc::UnboundedReceiver<QueuedItem>, batch: &mut Vec<QueuedItem>, policy: &BatchPolicy) {
    drain_ready(receiver, batch, policy.max_batch_size);
    // Requests whose bodies are being parsed right now are a scheduler turn away from the
    // queue: giving them that turn grows the batch at the cost of microseconds, where
    // even the shortest timer (1 ms resolution) would cost a millisecond.
    for _ in 0..READY_TURNS {
        if batch.len() >= policy.max_batch_size {
            return;
        }
        let before = batch.len();
        tokio::task::yield_now().await;
        drain_ready(receiver, batch, policy.max_batch_size);
        if batch.len() == before {
            break;
        }
    }
    if batch.len() >= policy.max_batch_size || policy.max_queue_delay.is_zero() {
        return;
    }
    let deadline = Instant::now() + policy.max_queue_delay;
    while batch.len() < policy.max_batch_size {
        tokio::select! {
            item = receiver.recv() => match item {
                Some(item) => batch.push(item),
                None => return,
            },
            _ = tokio::time::sleep_until(deadline) => return,
        }
    }
}

/// Scheduler turns the batcher yields while items keep arriving.
const READY_TURNS: usize = 4;

fn drain_ready(receiver: &mut mpsc::UnboundedReceiver<QueuedItem>, batch: &mut Vec<QueuedItem>, max: usize) {
    while batch.len() < max {
        match receiver.try_recv() {
            Ok(item) => batch.push(item),
            Err(_) => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tensor::{DataType, Tensor};
    use crate::serving::instances::BatcherLink;

    struct Harness {
        handle: BatcherHandle,
        jobs: handoff::Receiver<Job>,
        stats: Arc<ModelStats>,
        link: BatcherLink,
    }

    /// An instance count that never moves.
    struct FixedCount(usize);

    impl InstanceCount for FixedCount {
        fn live(&self) -> usize {
            self.0
        }
        fn wanted(self: Arc<Self>) {}
        fn hold_for_drain(&self) -> usize {
            self.0
        }
    }

    /// A batcher with `instances` idle instances and the given policy.
    fn batcher(instances: usize, max_batch_size: usize, max_queue_delay: Duration, max_queue_size: usize) -> Harness {
        let (jobs_tx, jobs) = super::handoff::queue();
        let stats = Arc::new(ModelStats::default());
        let policy = BatchPolicy {
            max_batch_size,
            max_queue_delay,
            max_queue_size,
        };
        let (link, handed_back) = BatcherLink::channel();
        let handle = BatcherHandle::spawn(
            "m".into(),
            policy,
            (Arc::new(Semaphore::new(instances)), Arc::new(FixedCount(instances))),
            (jobs_tx, handed_back),
            stats.clone(),
        );
        Harness {
            handle,
            jobs,
            stats,
            link,
        }
    }

    fn item(marker: u8) -> Item {
        vec![Tensor {
            name: "x".into(),
            datatype: DataType::Uint8,
            shape: vec![1],
            data: vec![marker],
        }]
    }

    fn markers(job: &Job) -> Vec<u8> {
        job.items.iter().map(|queued| queued.item[0].data[0]).collect()
    }

    /// A deadline no test reaches.
    fn far() -> Instant {
        Instant::now() + Duration::from_secs(3600)
    }

    /// The next batch handed to the instances, if one comes within `within` (of the
    /// paused clock, which jumps ahead whenever every task is idle).
    async fn next_job(jobs: &handoff::Receiver<Job>, within: Duration) -> Option<Job> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(job) = jobs.try_recv() {
                return Some(job);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_micros(100)).await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_lone_item_is_not_held_back() {
        let h = batcher(1, 8, Duration::ZERO, 64);
        let started = Instant::now();
        let _reply = h.handle.submit(vec![item(1)], far(), None).unwrap();
        let job = next_job(&h.jobs, Duration::from_secs(1)).await.expect("a batch");
        assert_eq!(markers(&job), vec![1]);
        assert!(started.elapsed() < Duration::from_millis(2), "{:?}", started.elapsed());
    }

    #[tokio::test(start_paused = true)]
    async fn batches_grow_while_every_instance_is_busy() {
        let h = batcher(1, 4, Duration::ZERO, 64);
        let _first = h.handle.submit(vec![item(0)], far(), None).unwrap();
        let busy = next_job(&h.jobs, Duration::from_secs(1)).await.expect("first batch");
        let _waiting: Vec<_> = (1..=6)
            .map(|m| h.handle.submit(vec![item(m)], far(), None).unwrap())
            .collect();
        assert!(
            next_job(&h.jobs, Duration::from_millis(50)).await.is_none(),
            "no instance is free"
        );
        drop(busy); // the instance is done: its permit returns
        let second = next_job(&h.jobs, Duration::from_secs(1)).await.expect("second batch");
        assert_eq!(
            markers(&second),
            vec![1, 2, 3, 4],
            "the queue fills the batch up to max_batch_size"
        );
        drop(second);
        let third = next_job(&h.jobs, Duration::from_secs(1)).await.expect("third batch");
        assert_eq!(markers(&third), vec![5, 6]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_free_instance_waits_max_queue_delay_for_a_fuller_batch() {
        let h = batcher(1, 4, Duration::from_millis(10), 64);
        let started = Instant::now();
        let _one = h.handle.submit(vec![item(1)], far(), None).unwrap();
        let job = next_job(&h.jobs, Duration::from_secs(1)).await.expect("a batch");
        let waited = started.elapsed();
        assert_eq!(markers(&job), vec![1]);
        assert!(
            waited >= Duration::from_millis(10) && waited < Duration::from_millis(13),
            "{waited:?}"
        );
        drop(job);
        // A full batch does not wait.
        let started = Instant::now();
        let _four: Vec<_> = (1..=4)
            .map(|m| h.handle.submit(vec![item(m)], far(), None).unwrap())
            .collect();
        let job = next_job(&h.jobs, Duration::from_secs(1)).await.expect("a full batch");
        assert_eq!(job.items.len(), 4);
        assert!(started.elapsed() < Duration::from_millis(2));
    }

    #[tokio::test(start_paused = true)]
    async fn items_whose_client_has_gone_are_skipped() {
        let h = batcher(1, 8, Duration::ZERO, 64);
        let _first = h.handle.submit(vec![item(0)], far(), None).unwrap();
        let busy = next_job(&h.jobs, Duration::from_secs(1)).await.expect("first batch");
        let kept = h.handle.submit(vec![item(1)], far(), None).unwrap();
        let gone = h.handle.submit(vec![item(2), item(3)], far(), None).unwrap();
        drop(gone); // that client hung up while its items waited
        drop(busy);
        let job = next_job(&h.jobs, Duration::from_secs(1)).await.expect("second batch");
        assert_eq!(markers(&job), vec![1]);
        assert_eq!(h.stats.items_abandoned.load(Ordering::Relaxed), 2);
        drop(kept);
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_queue_refuses_whole_requests() {
        let h = batcher(1, 2, Duration::ZERO, 4);
        let _first = h.handle.submit(vec![item(0)], far(), None).unwrap();
        let busy = next_job(&h.jobs, Duration::from_secs(1)).await.expect("first batch");
        let _three = h.handle.submit(vec![item(1), item(2), item(3)], far(), None).unwrap();
        let refused = h.handle.submit(vec![item(4), item(5)], far(), None);
        assert_eq!(
            refused.err(),
            Some(SubmitError::QueueFull {
                model: "m".into(),
                capacity: 4
            })
        );
        // None of the refused request's items were queued; one more fits.
        let _one = h.handle.submit(vec![item(6)], far(), None).unwrap();
        assert!(h.handle.submit(vec![item(7)], far(), None).is_err());
        drop(busy);
        let job = next_job(&h.jobs, Duration::from_secs(1)).await.expect("second batch");
        assert_eq!(markers(&job), vec![1, 2]);
        // Dispatched items leave the queue: their places are free again.
        assert!(h.handle.submit(vec![item(8), item(9)], far(), None).is_ok());
    }

    /// A part handed back by an instance: one item `marker` of request `request`.
    fn part(marker: u8, request: u64) -> (HandedBack, oneshot::Receiver<ItemOutcome>) {
        let (reply, receiver) = oneshot::channel();
        let item = JobItem {
            item: item(marker),
            reply,
            request,
            deadline: std::time::Instant::now() + Duration::from_secs(3600),
            trace: None,
        };
        let part = HandedBack {
            stage: StageKind::Predict,
            items: vec![item],
        };
        (part, receiver)
    }

    #[tokio::test(start_paused = true)]
    async fn handed_back_parts_and_fresh_items_take_turns() {
        let h = batcher(1, 1, Duration::ZERO, 64);
        let _first = h.handle.submit(vec![item(0)], far(), None).unwrap();
        let busy = next_job(&h.jobs, Duration::from_secs(1)).await.expect("first batch");
        // The busy batch failed and handed back three parts, two of request 7, one of 8;
        // meanwhile two fresh requests came.
        let mut replies = Vec::new();
        for (marker, request) in [(100, 7), (101, 7), (102, 8)] {
            let (part, reply) = part(marker, request);
            replies.push(reply);
            assert!(h.link.hand_back(part).is_ok());
        }
        let _fresh: Vec<_> = [1, 2]
            .map(|m| h.handle.submit(vec![item(m)], far(), None).unwrap())
            .into();
        drop(busy);
        let mut order = Vec::new();
        for _ in 0..5 {
            let job = next_job(&h.jobs, Duration::from_secs(1)).await.expect("a job");
            order.push((markers(&job)[0], job.rerun));
        }
        assert_eq!(
            order,
            vec![(1, false), (102, true), (2, false), (100, true), (101, true)],
            "fresh first, then a part, in turns; the request with fewer parts first"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_part_whose_deadline_passed_is_answered_not_run() {
        let h = batcher(1, 1, Duration::ZERO, 64);
        let (mut late, reply) = part(9, 1);
        late.items[0].deadline = std::time::Instant::now();
        assert!(h.link.hand_back(late).is_ok());
        let _fresh = h.handle.submit(vec![item(1)], far(), None).unwrap();
        let job = next_job(&h.jobs, Duration::from_secs(1)).await.expect("a job");
        assert_eq!(markers(&job), vec![1], "fresh items first");
        drop(job);
        assert_eq!(reply.await.unwrap().unwrap_err().status, 504);
        assert_eq!(h.stats.items_abandoned.load(Ordering::Relaxed), 1);
    }
}
