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

use super::instances::Job;
use super::stats::ModelStats;
use crate::outcome::ItemOutcome;
use crate::tensor::Item;

/// An item waiting in the queue.
pub struct QueuedItem {
    pub item: Item,
    pub reply: oneshot::Sender<ItemOutcome>,
    /// Holds the item's place in the bounded queue until it is dispatched.
    admission: OwnedSemaphorePermit,
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
        }
    }

    /// Queues every item of one request, or none of them.
    pub fn submit(&self, items: Vec<Item>) -> Result<Vec<oneshot::Receiver<ItemOutcome>>, SubmitError> {
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
        for item in items {
            let (reply, receiver) = oneshot::channel();
            // `split(1)` hands each item its own place; it only fails when none are left,
            // which the count above rules out.
            let admission = permits.split(1).ok_or_else(full)?;
            self.queue
                .send(QueuedItem { item, reply, admission })
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

        let before = batch.len();
        batch.retain(|queued| !queued.reply.is_closed());
        let gone = before - batch.len();
        if gone > 0 {
            stats.items_abandoned.fetch_add(gone as u64, Ordering::Relaxed);
        }
        if batch.is_empty() {
            continue;
        }
        let items = batch
            .into_iter()
            .map(|QueuedItem { item, reply, admission }| {
                drop(admission);
                (item, reply)
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
