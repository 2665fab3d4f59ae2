//! The instance pool: one thread per pipeline instance, all fed from one job channel.
//!
//! Plugins run on these dedicated threads, never on the async runtime: wasmtime's sync
//! WASI calls block, and a long plugin call must not stall the HTTP edge.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::{oneshot, OwnedSemaphorePermit};

use super::stats::ModelStats;
use crate::outcome::{ItemError, ItemOutcome};
use crate::pipeline::PipelineInstance;
use crate::tensor::Item;

/// A batch for one instance.
pub struct Job {
    pub items: Vec<(Item, oneshot::Sender<ItemOutcome>)>,
    /// Returned (dropped) when the instance is done, which lets the batcher dispatch again.
    pub instance: OwnedSemaphorePermit,
}

/// Starts one thread per instance; they exit when the job channel closes and is drained.
pub fn spawn_workers(
    model: &str,
    instances: Vec<PipelineInstance>,
    jobs: crossbeam_channel::Receiver<Job>,
    stats: Arc<ModelStats>,
) -> std::io::Result<()> {
    instances.into_iter().enumerate().try_for_each(|(n, instance)| {
        let jobs = jobs.clone();
        let stats = stats.clone();
        std::thread::Builder::new()
            .name(format!("{model}#{n}"))
            .spawn(move || work(instance, jobs, stats))
            .map(drop)
    })
}

fn work(mut pipeline: PipelineInstance, jobs: crossbeam_channel::Receiver<Job>, stats: Arc<ModelStats>) {
    stats.instances_live.fetch_add(1, Ordering::Relaxed);
    let mut whole = true;
    while let Ok(Job { items, instance }) = jobs.recv() {
        // A client may have gone while the batch waited for this thread.
        let queued = items.len();
        let (items, replies): (Vec<Item>, Vec<_>) = items.into_iter().filter(|(_, reply)| !reply.is_closed()).unzip();
        if items.len() < queued {
            stats
                .items_abandoned
                .fetch_add((queued - items.len()) as u64, Ordering::Relaxed);
        }
        if items.is_empty() {
            continue;
        }
        stats.batches.fetch_add(1, Ordering::Relaxed);
        stats.items.fetch_add(items.len() as u64, Ordering::Relaxed);
        let traps_before = pipeline.traps();
        let count = items.len();
        // The host must survive everything; a panic here is a host bug, but it must cost
        // only this batch, not the instance thread.
        let outcomes = match std::panic::catch_unwind(AssertUnwindSafe(|| pipeline.run(items))) {
            Ok(outcomes) => outcomes,
            Err(panic) => {
                let message = panic_text(panic.as_ref());
                tracing::error!("pipeline panicked: {message}");
                match pipeline.fresh() {
                    Ok(fresh) => pipeline = fresh,
                    Err(e) => tracing::error!("cannot rebuild the pipeline instance: {e}"),
                }
                vec![
                    Err(ItemError::trap(format!(
                        "internal error while running the pipeline: {message}"
                    )));
                    count
                ]
            }
        };
        stats
            .traps
            .fetch_add(pipeline.traps() - traps_before, Ordering::Relaxed);
        if whole != pipeline.is_whole() {
            whole = pipeline.is_whole();
            if whole {
                stats.instances_live.fetch_add(1, Ordering::Relaxed);
            } else {
                stats.instances_live.fetch_sub(1, Ordering::Relaxed);
            }
        }
        for (reply, outcome) in replies.into_iter().zip(outcomes) {
            let counter = if outcome.is_ok() {
                &stats.items_ok
            } else {
                &stats.items_failed
            };
            counter.fetch_add(1, Ordering::Relaxed);
            // The client may have gone meanwhile; its answer has nowhere to go.
            let _ = reply.send(outcome);
        }
        drop(instance);
    }
    if whole {
        stats.instances_live.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The message of a caught panic, when it has one.
fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}
