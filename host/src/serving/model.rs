//! A model version in service: its configuration, its instances (their threads and the
//! idle path) and its batcher.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::batcher::{BatchPolicy, BatcherHandle, SubmitError};
use super::idle::{IdleModel, IdlePath};
use super::instances::{start_workers_on_demand, BatcherLink, Completion};
use super::pool::InstancePool;
use super::pool::{Growth, InstanceCount, Scaling};
use super::residency::LastUse;
use super::stats::{EdgeLabel, ModelStats};
use crate::model::config::ModelConfig;
use crate::model::outcome::{ItemError, ItemOutcome};
use crate::model::tensor::Item;
use crate::pipeline::LoadedModel;
use crate::runtime::ModelShared;
use crate::traces::ItemsTrace;

/// Why a model version could not be loaded and started.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Load(#[from] crate::pipeline::LoadError),
}

/// Which latency histograms a model version keeps: with metrics on (`server` is the
/// server-wide statistics every model also counts in), its own too when its
/// `[metrics] histograms` says so, else `by_default`.
#[derive(Clone, Copy)]
pub struct Histogramming<'a> {
    pub server: Option<&'a Arc<ModelStats>>,
    pub by_default: bool,
}

/// A model version that is ready to serve.
pub struct Model {
    pub config: ModelConfig,
    pub stats: Arc<ModelStats>,
    /// The metrics and metadata its plugins declared.
    pub shared: Arc<ModelShared>,
    /// Its latest request's arrival (or its start): what least-recently-used eviction
    /// and the idle unload go by.
    pub last_used: LastUse,
    /// What it held once started, measured: what its next load makes room for, once it
    /// is evicted.
    pub loaded_bytes: u64,
    /// How long its load took (compile or cache, init, start): what a reload would cost,
    /// which its protection from eviction goes by. Set by whoever loaded it.
    pub load_took: std::time::Duration,
    batcher: BatcherHandle,
    idle: IdlePath,
    pool: Arc<InstancePool>,
    completion: Completion,
}

impl Model {
    /// Starts serving a loaded model: one thread per instance and the batcher task, on
    /// the current tokio runtime. The threads exit by themselves once the model is
    /// dropped and its queue is drained. `histograms`: whether to keep latency
    /// histograms (metrics on); `edges`: the edges whose requests are counted from the start.
    pub fn start(
        loaded: LoadedModel,
        histograms: Histogramming<'_>,
        edges: &[&'static EdgeLabel],
        growth: Growth,
    ) -> Result<Self, StartError> {
        let LoadedModel {
            config,
            instances,
            template,
            shared,
        } = loaded;
        let own = histograms.server.is_some() && config.histograms.unwrap_or(histograms.by_default);
        let stats = Arc::new(ModelStats::new(own, edges).counted_in(histograms.server.cloned()));
        let policy = BatchPolicy {
            max_batch_size: config.batching.max_batch_size,
            max_queue_delay: config.batching.max_queue_delay,
            max_queue_size: config.batching.max_queue_size,
        };
        let count = instances.len();
        let mut scaling = Scaling::new(
            (template, shared.clone()),
            (growth.floor, config.limits.instances),
            growth.idle_after,
        );
        scaling.instance_bytes = shared.memory.bytes() as u64 / count.max(1) as u64;
        scaling.room = growth.room;
        let pool = Arc::new(InstancePool::new(instances, stats.clone(), scaling));
        let permits = pool.permits().clone();
        let idle = (permits.clone(), pool.clone() as Arc<dyn InstanceCount>);
        let (link, handed_back) = BatcherLink::channel();
        // Up to a thread per instance the model may have, started as its batches need them.
        let (jobs, completion) = start_workers_on_demand(
            &config.name,
            (pool.clone(), config.limits.instances),
            link.clone(),
            stats.clone(),
        );
        let batcher = BatcherHandle::spawn(
            config.name.as_str().into(),
            policy,
            idle,
            (jobs, handed_back),
            stats.clone(),
        );
        let idle = IdlePath::new(IdleModel {
            idle: permits,
            pool: pool.clone(),
            link,
            stats: stats.clone(),
            enabled: policy.max_queue_delay.is_zero(),
            longest_run: config.limits.stage_timeout * u32::try_from(config.stages.len()).unwrap_or(u32::MAX),
        });
        let loaded_bytes = shared.held_bytes();
        Ok(Self {
            config,
            stats,
            shared,
            last_used: LastUse::now(),
            loaded_bytes,
            load_took: std::time::Duration::ZERO,
            batcher,
            idle,
            pool,
            completion,
        })
    }

    /// Runs items through the model; each gets its outcome, or a 504 once `timeout` passes.
    /// `trace`: their request's, when it is traced (the batch that serves them shows in it).
    pub async fn infer(
        &self,
        items: Vec<Item>,
        timeout: Duration,
        trace: Option<Arc<ItemsTrace>>,
    ) -> Result<Vec<ItemOutcome>, SubmitError> {
        let deadline = Instant::now() + timeout;
        let arrival = self.idle.arrive();
        let receivers = match self.idle.try_run(&arrival, &self.batcher, items, deadline, &trace) {
            Ok(answered) => answered,
            Err(items) => self.batcher.submit(items, deadline, trace)?,
        };
        let mut outcomes = Vec::with_capacity(receivers.len());
        for receiver in receivers {
            let outcome = match tokio::time::timeout_at(deadline, receiver).await {
                Ok(Ok(outcome)) => outcome,
                Ok(Err(_)) => Err(ItemError::trap("the model instance stopped before answering")),
                Err(_) => Err(ItemError::deadline(format!(
                    "request timed out after {} us",
                    timeout.as_micros()
                ))),
            };
            if outcome.as_ref().is_err_and(ItemError::is_deadline) {
                self.stats.timeouts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            outcomes.push(outcome);
        }
        Ok(outcomes)
    }

    /// What this version holds in memory, measured (instances, its share of code, graphs).
    pub fn held_bytes(&self) -> u64 {
        self.shared.held_bytes()
    }

    /// Its instances now (they follow the load between `limits.min_instances` and
    /// `limits.instances`).
    pub fn instances(&self) -> usize {
        self.pool.live()
    }

    /// Lets one instance idle past the idle time go, down to the floor; whether one went.
    pub fn shrink_idle_instances(&self) -> bool {
        self.pool.shrink_idle()
    }

    /// Items waiting in this version's queue now.
    pub fn queue_depth(&self) -> usize {
        self.batcher.queued()
    }

    /// Resolves once this version's queue is drained and its instance threads have
    /// exited, which happens after the last holder of the model lets go of it.
    pub fn completion(&self) -> Completion {
        self.completion.clone()
    }
}
