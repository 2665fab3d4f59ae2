//! The instance threads: up to one per instance a model version may have, all fed from
//! one job queue (`super::handoff`), each running the batcher's jobs on an instance it
//! takes from the model's pool (`super::pool`). They start as the batcher's jobs first
//! need them, not with the model: most of the models a node loads on demand answer their
//! few requests on the idle path, and a storm of cold loads started and ended two threads
//! a model on the threads that serve.
//!
//! Batches run on these dedicated threads, never on the async runtime's own: wasmtime's
//! sync WASI calls block, and a long plugin call must not stall the HTTP edge. (The idle
//! path, `serving::idle`, runs a lone request's job on the runtime thread that decoded it,
//! through the same [`run_job`], while another runtime thread stays free for the edge.)
//!
//! Parts of a job to re-run after a failed call (see `pipeline::bisect`) go back to the
//! batcher, which runs them later as jobs of their own, between fresh batches.

use std::cell::RefCell;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{oneshot, OwnedSemaphorePermit};

use super::handoff;
use super::pool::{InstancePool, Pooled};
use super::stats::ModelStats;
use crate::model::outcome::{ItemError, ItemOutcome};
use crate::model::tensor::Item;
use crate::model::StageKind;
use crate::pipeline::{Audience, Run};
use crate::traces::{journal, record_batch, BatchRun, ItemsTrace};

/// An item handed to an instance, with what the pipeline needs to know of its client.
pub struct JobItem {
    pub item: Item,
    pub reply: oneshot::Sender<ItemOutcome>,
    pub request: u64,
    pub deadline: std::time::Instant,
    /// Its request's trace, when the request is traced.
    pub trace: Option<Arc<ItemsTrace>>,
}

/// A batch for one instance.
pub struct Job {
    pub items: Vec<JobItem>,
    /// The stage its items are in: the first for fresh items, a later one for a part
    /// handed back (whose items are re-run as one call).
    pub start: StageKind,
    /// Whether its items were handed back by an earlier job (counted when that one ran).
    pub rerun: bool,
    /// Returned (dropped) when the instance is done, which lets the batcher dispatch again.
    pub instance: OwnedSemaphorePermit,
}

/// A part of a job handed back to the batcher, to run later as a job of its own.
pub struct HandedBack {
    pub stage: StageKind,
    pub items: Vec<JobItem>,
}

/// What the instance threads share with their model's batcher: where handed-back parts go.
#[derive(Clone)]
pub struct BatcherLink {
    handed_back: tokio::sync::mpsc::UnboundedSender<HandedBack>,
    /// Parts sent and not yet dispatched again (the batcher counts them down).
    pending: Arc<AtomicUsize>,
}

/// The batcher's end of its link: the parts handed back, and how many are on their way.
pub struct HandedBackParts {
    pub parts: tokio::sync::mpsc::UnboundedReceiver<HandedBack>,
    pub pending: Arc<AtomicUsize>,
}

impl BatcherLink {
    /// A link, and the batcher's end of it.
    pub fn channel() -> (Self, HandedBackParts) {
        let (handed_back, parts) = tokio::sync::mpsc::unbounded_channel();
        let pending = Arc::new(AtomicUsize::new(0));
        let link = Self {
            handed_back,
            pending: pending.clone(),
        };
        (link, HandedBackParts { parts, pending })
    }

    /// Hands a part back to the batcher; gives it back if the batcher is gone.
    pub fn hand_back(&self, part: HandedBack) -> Result<(), HandedBack> {
        // Counted before it is visible, so that the queue never looks empty while a part
        // is on its way.
        self.pending.fetch_add(1, Ordering::AcqRel);
        self.handed_back.send(part).map_err(|lost| {
            self.pending.fetch_sub(1, Ordering::AcqRel);
            lost.0
        })
    }
}

/// Resolves once every instance thread of a model has exited, and joins them.
///
/// Each thread holds a sender of one channel; when the last thread ends, the channel
/// closes (as mini-redis learns that its connections are done), so waiting costs no
/// polling.
#[derive(Clone)]
pub struct Completion {
    closed: Arc<tokio::sync::Mutex<tokio::sync::mpsc::Receiver<()>>>,
    threads: Arc<std::sync::Mutex<Vec<std::thread::JoinHandle<()>>>>,
}

impl Completion {
    /// Waits until every thread has exited, then joins them.
    pub async fn wait(&self) {
        while self.closed.lock().await.recv().await.is_some() {}
        let threads: Vec<_> = match self.threads.lock() {
            Ok(mut threads) => threads.drain(..).collect(),
            Err(_) => Vec::new(),
        };
        // They have all returned: joining only collects them.
        for thread in threads {
            if thread.join().is_err() {
                tracing::error!("an instance thread panicked");
            }
        }
    }
}

/// The job queue of a model's instance threads, which starts them as jobs find none
/// idle, up to `most` (one per instance of `pool` there may be); they exit when the queue
/// closes and is drained.
pub fn start_workers_on_demand(
    model: &str,
    (pool, most): (Arc<InstancePool>, usize),
    link: BatcherLink,
    stats: Arc<ModelStats>,
) -> (handoff::Sender<Job>, Completion) {
    let (done, closed) = tokio::sync::mpsc::channel::<()>(1);
    let threads = Arc::new(std::sync::Mutex::new(Vec::with_capacity(most)));
    let started = threads.clone();
    let model = model.to_owned();
    let start = move |jobs: handoff::Receiver<Job>| {
        let (pool, link, stats, done) = (pool.clone(), link.clone(), stats.clone(), done.clone());
        let mut started = crate::sync::lock(&started);
        let thread = std::thread::Builder::new()
            .name(format!("{model}#{}", started.len()))
            .spawn(move || {
                work(&pool, jobs, &link, &stats);
                // The pool (and with the last holder, the instances) goes before `done`.
                drop(pool);
                drop(done);
            })?;
        started.push(thread);
        Ok(())
    };
    let jobs = handoff::queue_started_on_demand(most, Box::new(start));
    let completion = Completion {
        closed: Arc::new(tokio::sync::Mutex::new(closed)),
        threads,
    };
    (jobs, completion)
}

fn work(pool: &InstancePool, jobs: handoff::Receiver<Job>, link: &BatcherLink, stats: &ModelStats) {
    while let Some(Job {
        items,
        start,
        rerun,
        instance,
    }) = jobs.recv()
    {
        let Some(mut pooled) = pool.take() else {
            // A job always holds an idle permit, and every permit has its instance.
            tracing::error!("no idle instance for a job that holds an idle permit");
            for item in items {
                let _ = item
                    .reply
                    .send(Err(ItemError::trap("internal error: no idle instance")));
            }
            continue;
        };
        run_job(&mut pooled, (items, start, rerun), link, stats);
        pool.put(pooled);
        drop(instance);
    }
}

/// Runs one job's items from stage `start` on `pooled`, answers every item, hands parts
/// to re-run back to the batcher, and counts it all in `stats`. `rerun`: whether the items
/// were handed back by an earlier job (counted when that one ran).
pub fn run_job(
    pooled: &mut Pooled,
    (items, start, rerun): (Vec<JobItem>, StageKind, bool),
    link: &BatcherLink,
    stats: &ModelStats,
) {
    let pipeline = &mut pooled.pipeline;
    let mut replies = Vec::with_capacity(items.len());
    let mut clients = Vec::with_capacity(items.len());
    let mut traces = Vec::with_capacity(items.len());
    let items: Vec<Item> = items
        .into_iter()
        .map(|job_item| {
            replies.push(Some(job_item.reply));
            clients.push((job_item.request, job_item.deadline));
            traces.push(job_item.trace);
            job_item.item
        })
        .collect();
    let traced = traces.iter().any(Option::is_some);
    let started = std::time::Instant::now();
    let traps_before = pipeline.traps();
    let shed_before = pipeline.shed();
    let count = items.len();
    // The host must survive everything; a panic here is a host bug, but it must cost
    // only this batch, not the instance thread.
    let audience = JobAudience {
        replies: &replies,
        clients: &clients,
        dropped: RefCell::new(vec![false; count]),
    };
    let run_pipeline = || pipeline.run_from(start, items, &audience);
    let outcome = if traced {
        let (outcome, calls) = journal::recording(|| std::panic::catch_unwind(AssertUnwindSafe(run_pipeline)));
        let run = BatchRun {
            items: &traces,
            started,
            ended: std::time::Instant::now(),
            rerun,
        };
        record_batch(run, calls);
        outcome
    } else {
        std::panic::catch_unwind(AssertUnwindSafe(run_pipeline))
    };
    let run = match outcome {
        Ok(run) => run,
        Err(panic) => {
            let message = super::loaders::panic_text(panic.as_ref());
            tracing::error!("pipeline panicked: {message}");
            stats.replacements.fetch_add(1, Ordering::Relaxed);
            match pipeline.fresh() {
                Ok(fresh) => *pipeline = fresh,
                Err(e) => tracing::error!("cannot rebuild the pipeline instance: {e}"),
            }
            let error = ItemError::trap(format!("internal error while running the pipeline: {message}"));
            Run {
                outcomes: vec![Some(Err(error)); count],
                handed_back: Vec::new(),
            }
        }
    };
    stats.record_padding(pipeline.padding());
    if rerun {
        stats.record_rerun(started.elapsed(), pipeline.stage_times());
    } else {
        stats.record_batch(count, started.elapsed(), pipeline.stage_times());
    }
    let dropped = audience.dropped.borrow().iter().filter(|d| **d).count();
    stats.items_abandoned.fetch_add(dropped as u64, Ordering::Relaxed);
    // A trapped instance is replaced at once: one replacement per trap, and one per
    // instance whose grown memory was given back.
    let trapped = pipeline.traps().saturating_sub(traps_before);
    let shed = pipeline.shed().saturating_sub(shed_before);
    stats.traps.fetch_add(trapped, Ordering::Relaxed);
    stats.replacements.fetch_add(trapped + shed, Ordering::Relaxed);
    pooled.count_whole(stats);
    for resume in run.handed_back {
        let items = resume
            .items
            .into_iter()
            .filter_map(|(index, item)| {
                let reply = replies.get_mut(index)?.take()?;
                let (request, deadline) = clients[index];
                Some(JobItem {
                    item,
                    reply,
                    request,
                    deadline,
                    trace: traces[index].clone(),
                })
            })
            .collect();
        // Items nobody waits for any more are answered now, not queued for a re-run.
        let items = keep_wanted(
            items,
            stats,
            "not re-run: the request's deadline passed or its client left",
        );
        if items.is_empty() {
            continue;
        }
        let part = HandedBack {
            stage: resume.stage,
            items,
        };
        if let Err(lost) = link.hand_back(part) {
            // The batcher is gone (the model is being torn down): answer them now.
            for item in lost.items {
                let _ = item.reply.send(Err(ItemError::unavailable(
                    "the model was unloaded before the item ran",
                )));
            }
        }
    }
    for (reply, outcome) in replies.into_iter().zip(run.outcomes) {
        let (Some(reply), Some(outcome)) = (reply, outcome) else {
            continue;
        };
        let counter = if outcome.is_ok() {
            &stats.items_ok
        } else {
            &stats.items_failed
        };
        counter.fetch_add(1, Ordering::Relaxed);
        // The client may have gone meanwhile; its answer has nowhere to go.
        let _ = reply.send(outcome);
    }
}

/// `items` without those whose client left or whose request's deadline passed: those are
/// answered 504 with `why` (if anyone still listens) and counted as abandoned.
pub fn keep_wanted(items: Vec<JobItem>, stats: &ModelStats, why: &'static str) -> Vec<JobItem> {
    let now = std::time::Instant::now();
    let (wanted, gone): (Vec<JobItem>, Vec<JobItem>) = items
        .into_iter()
        .partition(|item| !item.reply.is_closed() && now < item.deadline);
    if !gone.is_empty() {
        stats.items_abandoned.fetch_add(gone.len() as u64, Ordering::Relaxed);
        for item in gone {
            let _ = item.reply.send(Err(ItemError::deadline(why)));
        }
    }
    wanted
}

/// A job's items as the pipeline sees their clients: wanted while the reply channel is
/// open and the request's deadline is ahead; each item found unwanted is counted once.
struct JobAudience<'a> {
    replies: &'a [Option<oneshot::Sender<ItemOutcome>>],
    clients: &'a [(u64, std::time::Instant)],
    dropped: RefCell<Vec<bool>>,
}

impl Audience for JobAudience<'_> {
    fn wanted(&self, index: usize) -> bool {
        let waiting = self
            .replies
            .get(index)
            .is_some_and(|reply| reply.as_ref().is_some_and(|reply| !reply.is_closed()));
        let in_time = self
            .clients
            .get(index)
            .is_some_and(|(_, deadline)| std::time::Instant::now() < *deadline);
        let wanted = waiting && in_time;
        if !wanted {
            if let Some(dropped) = self.dropped.borrow_mut().get_mut(index) {
                *dropped = true;
            }
        }
        wanted
    }

    fn request(&self, index: usize) -> u64 {
        self.clients.get(index).map_or(u64::MAX, |(request, _)| *request)
    }

    fn takes_reruns(&self) -> bool {
        true
    }
}
