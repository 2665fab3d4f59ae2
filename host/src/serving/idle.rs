//! The idle path: a one-item request that finds its model with a free instance and
//! nothing queued runs at once, on the thread that decoded it, instead of going through
//! the batcher's turn and two thread hand-offs (to an instance thread and back), which
//! at low load cost more than the plugins' own work.
//!
//! What keeps the batcher's guarantees:
//! - **Only when idle**: nothing is queued or waiting to be re-run, an idle permit is free
//!   (the batcher, which waits for work before it takes a permit, is not waiting for one:
//!   tokio's semaphore gives released permits to waiters first), and the model does not
//!   wait for fuller batches (`max_queue_delay` zero). Under load every instance is busy
//!   and requests queue and batch as before.
//! - **Deadlines**: the request must have time for every stage's call limit (a one-item
//!   run calls each stage at most once: re-runs are handed back to the batcher, and a
//!   trapped instance is replaced after the answer, off the request's path), so it is
//!   answered by its deadline as a queued one is; otherwise it queues, and is answered
//!   at its deadline whatever the plugin does.
//! - **Fairness**: the job runs inside `block_in_place`, which hands the runtime thread's
//!   other tasks to another thread first, so a long plugin call never stalls the edge.
//!   On a current-thread runtime (where that is impossible) requests always queue.
//! - **Traps and drain**: the job is the batcher's job (`instances::run_job`): same
//!   bisection, answers and statistics; the request holds its model version until it is
//!   answered, so a drain waits for it as for a queued one.

use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::{Handle, RuntimeFlavor};
use tokio::sync::{oneshot, Semaphore};
use tokio::time::Instant;

use super::batcher::BatcherHandle;
use super::instances::{run_job, BatcherLink, InstancePool, JobItem};
use super::stats::ModelStats;
use crate::model::outcome::ItemOutcome;
use crate::model::tensor::Item;
use crate::model::StageKind;

/// What a request needs to run on a model's free instance itself.
pub struct IdlePath {
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

impl IdlePath {
    /// Runs `items` now if the path is open to them (see the module's documentation),
    /// answering them before it returns; gives them back otherwise, to be queued.
    pub fn try_run(
        &self,
        batcher: &BatcherHandle,
        items: Vec<Item>,
        deadline: Instant,
    ) -> Result<Vec<oneshot::Receiver<ItemOutcome>>, Vec<Item>> {
        let open = self.enabled
            && items.len() == 1
            && deadline.saturating_duration_since(Instant::now()) >= self.longest_run
            && batcher.is_empty()
            && Handle::try_current().is_ok_and(|handle| handle.runtime_flavor() == RuntimeFlavor::MultiThread);
        if !open {
            return Err(items);
        }
        let Ok(permit) = self.idle.clone().try_acquire_owned() else {
            return Err(items);
        };
        let Some(mut instance) = self.pool.take() else {
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
                self.stats.record_queue_wait(Duration::ZERO);
                JobItem {
                    item,
                    reply,
                    request,
                    deadline,
                }
            })
            .collect();
        instance.replace_at_once(false);
        tokio::task::block_in_place(|| {
            run_job(
                &mut instance,
                (items, StageKind::Preprocess, false),
                &self.link,
                &self.stats,
            )
        });
        instance.replace_at_once(true);
        if instance.is_whole() {
            self.pool.put(instance);
            drop(permit);
        } else {
            // A stage trapped: its replacement (the plugin's `init`, up to its own limit)
            // is built off the request's path, the instance kept from others meanwhile.
            let (pool, stats) = (self.pool.clone(), self.stats.clone());
            tokio::task::spawn_blocking(move || {
                instance.repair(&stats);
                pool.put(instance);
                drop(permit);
            });
        }
        Ok(receivers)
    }
}
