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

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::instances::{Job, JobItem};
use super::stats::ModelStats;
use crate::model::outcome::{ItemError, ItemOutcome};
use crate::model::tensor::Item;

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
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
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
    /// instance; a dispatched batch carries one until its instance is done with it.
    pub fn spawn(
        model: Arc<str>,
        policy: BatchPolicy,
        idle: Arc<Semaphore>,
        jobs: crossbeam_channel::Sender<Job>,
        stats: Arc<ModelStats>,
    ) -> Self {
        let (queue, receiver) = mpsc::unbounded_channel();
        tokio::spawn(run_queue(receiver, policy, idle, jobs, stats));
        Self {
            model,
            queue,
            admission: Arc::new(Semaphore::new(policy.max_queue_size)),
            capacity: policy.max_queue_size,
            requests: Arc::default(),
        }
    }

    /// Items waiting in the queue now.
    pub fn queued(&self) -> usize {
        self.capacity.saturating_sub(self.admission.available_permits())
    }

    /// Queues every item of one request, or none of them; the request stops waiting at
    /// `deadline`.
    pub fn submit(
        &self,
        items: Vec<Item>,
        deadline: Instant,
    ) -> Result<Vec<oneshot::Receiver<ItemOutcome>>, SubmitError> {
        let request = self.requests.fetch_add(1, Ordering::Relaxed);
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

async fn run_queue(
    mut receiver: mpsc::UnboundedReceiver<QueuedItem>,
    policy: BatchPolicy,
    idle: Arc<Semaphore>,
    jobs: crossbeam_channel::Sender<Job>,
    stats: Arc<ModelStats>,
) {
    loop {
        let Ok(instance) = idle.clone().acquire_owned().await else {
            return;
        };
        let Some(first) = receiver.recv().await else {
            return; // every handle is gone and the queue is drained
        };
        let mut batch = Vec::with_capacity(policy.max_batch_size);
        batch.push(first);
        gather(&mut receiver, &mut batch, &policy).await;

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
            })
            .collect();
        if jobs.send(Job { items, instance }).is_err() {
            return; // the instances are gone: the model is being torn down
        }
    }
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

    struct Harness {
        handle: BatcherHandle,
        jobs: crossbeam_channel::Receiver<Job>,
        stats: Arc<ModelStats>,
    }

    /// A batcher with `instances` idle instances and the given policy.
    fn batcher(instances: usize, max_batch_size: usize, max_queue_delay: Duration, max_queue_size: usize) -> Harness {
        let (jobs_tx, jobs) = crossbeam_channel::unbounded();
        let stats = Arc::new(ModelStats::default());
        let policy = BatchPolicy {
            max_batch_size,
            max_queue_delay,
            max_queue_size,
        };
        let handle = BatcherHandle::spawn(
            "m".into(),
            policy,
            Arc::new(Semaphore::new(instances)),
            jobs_tx,
            stats.clone(),
        );
        Harness { handle, jobs, stats }
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
    async fn next_job(jobs: &crossbeam_channel::Receiver<Job>, within: Duration) -> Option<Job> {
        let deadline = Instant::now() + within;
        loop {
            if let Ok(job) = jobs.try_recv() {
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
        let _reply = h.handle.submit(vec![item(1)], far()).unwrap();
        let job = next_job(&h.jobs, Duration::from_secs(1)).await.expect("a batch");
        assert_eq!(markers(&job), vec![1]);
        assert!(started.elapsed() < Duration::from_millis(2), "{:?}", started.elapsed());
    }

    #[tokio::test(start_paused = true)]
    async fn batches_grow_while_every_instance_is_busy() {
        let h = batcher(1, 4, Duration::ZERO, 64);
        let _first = h.handle.submit(vec![item(0)], far()).unwrap();
        let busy = next_job(&h.jobs, Duration::from_secs(1)).await.expect("first batch");
        let _waiting: Vec<_> = (1..=6)
            .map(|m| h.handle.submit(vec![item(m)], far()).unwrap())
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
        let _one = h.handle.submit(vec![item(1)], far()).unwrap();
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
            .map(|m| h.handle.submit(vec![item(m)], far()).unwrap())
            .collect();
        let job = next_job(&h.jobs, Duration::from_secs(1)).await.expect("a full batch");
        assert_eq!(job.items.len(), 4);
        assert!(started.elapsed() < Duration::from_millis(2));
    }

    #[tokio::test(start_paused = true)]
    async fn items_whose_client_has_gone_are_skipped() {
        let h = batcher(1, 8, Duration::ZERO, 64);
        let _first = h.handle.submit(vec![item(0)], far()).unwrap();
        let busy = next_job(&h.jobs, Duration::from_secs(1)).await.expect("first batch");
        let kept = h.handle.submit(vec![item(1)], far()).unwrap();
        let gone = h.handle.submit(vec![item(2), item(3)], far()).unwrap();
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
        let _first = h.handle.submit(vec![item(0)], far()).unwrap();
        let busy = next_job(&h.jobs, Duration::from_secs(1)).await.expect("first batch");
        let _three = h.handle.submit(vec![item(1), item(2), item(3)], far()).unwrap();
        let refused = h.handle.submit(vec![item(4), item(5)], far());
        assert_eq!(
            refused.err(),
            Some(SubmitError::QueueFull {
                model: "m".into(),
                capacity: 4
            })
        );
        // None of the refused request's items were queued; one more fits.
        let _one = h.handle.submit(vec![item(6)], far()).unwrap();
        assert!(h.handle.submit(vec![item(7)], far()).is_err());
        drop(busy);
        let job = next_job(&h.jobs, Duration::from_secs(1)).await.expect("second batch");
        assert_eq!(markers(&job), vec![1, 2]);
        // Dispatched items leave the queue: their places are free again.
        assert!(h.handle.submit(vec![item(8), item(9)], far()).is_ok());
    }
}
