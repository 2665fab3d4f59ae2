//! A loaded model version: its configuration, its instances and its batcher.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::batcher::{BatchPolicy, BatcherHandle, SubmitError};
use super::instances::spawn_workers;
use super::stats::ModelStats;
use crate::model_config::{ConfigError, ModelConfig};
use crate::outcome::{ItemError, ItemOutcome};
use crate::pipeline::PipelineTemplate;
use crate::runtime::{deadline_ticks, Runtime, RuntimeError, SandboxLimits, StageKind, StageTag, StageTemplate};
use crate::tensor::Item;

/// Why a model version could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error("cannot start instance threads: {0}")]
    Threads(std::io::Error),
}

/// A model version that is ready to serve.
pub struct Model {
    pub config: ModelConfig,
    pub stats: Arc<ModelStats>,
    batcher: BatcherHandle,
}

impl Model {
    /// Loads the model folder `dir`: parses its config, compiles every stage and
    /// initialises every instance. Blocking (compiles wasm); call from a blocking thread,
    /// inside a tokio runtime (the batcher task is spawned on it).
    pub fn load(runtime: &Runtime, dir: &Path, tokio: &tokio::runtime::Handle) -> Result<Self, LoadError> {
        Self::load_with_instances(runtime, dir, tokio, None)
    }

    /// [`Model::load`] with the instance count overridden (`tensorplug check` needs one).
    pub fn load_with_instances(
        runtime: &Runtime,
        dir: &Path,
        tokio: &tokio::runtime::Handle,
        instances: Option<usize>,
    ) -> Result<Self, LoadError> {
        let mut config = ModelConfig::load(dir)?;
        if let Some(n) = instances {
            config.limits.instances = n;
        }
        let limits = SandboxLimits {
            memory_bytes: config.limits.memory_bytes,
            deadline_ticks: deadline_ticks(config.limits.stage_timeout),
        };
        let (model, version): (Arc<str>, Arc<str>) = (config.name.as_str().into(), config.version.as_str().into());
        let load = |kind: StageKind, file: &Path| {
            let tag = StageTag {
                model: model.clone(),
                version: version.clone(),
                stage: kind.name(),
            };
            StageTemplate::load(runtime, kind, file, &config.dir, tag, limits, &config.parameters)
        };
        let mut template = PipelineTemplateBuilder::default();
        for (kind, file) in &config.stages {
            let stage = load(*kind, file)?;
            match kind {
                StageKind::Preprocess => template.preprocess = Some(stage),
                StageKind::Predict => template.predict = Some(stage),
                StageKind::Postprocess => template.postprocess = Some(stage),
            }
        }
        let template = Arc::new(PipelineTemplate {
            preprocess: template.preprocess,
            predict: template.predict.ok_or_else(|| ConfigError {
                file: config.dir.join(crate::model_config::MODEL_FILE),
                message: "key `stages.predict` is required".into(),
            })?,
            postprocess: template.postprocess,
            outputs: config.outputs.clone(),
        });
        let instances = (0..config.limits.instances)
            .map(|_| template.instantiate())
            .collect::<Result<Vec<_>, _>>()?;

        let stats = Arc::new(ModelStats::default());
        let (jobs_tx, jobs_rx) = crossbeam_channel::unbounded();
        // The threads exit by themselves once the batcher is dropped and its queue drained.
        spawn_workers(&config.name, instances, jobs_rx, stats.clone()).map_err(LoadError::Threads)?;
        let policy = BatchPolicy {
            max_batch_size: config.batching.max_batch_size,
            max_queue_delay: config.batching.max_queue_delay,
            max_queue_size: config.batching.max_queue_size,
        };
        let idle = Arc::new(Semaphore::new(config.limits.instances));
        let _guard = tokio.enter();
        let batcher = BatcherHandle::spawn(model, policy, idle, jobs_tx, stats.clone());
        Ok(Self { config, stats, batcher })
    }

    /// Runs items through the model; each gets its outcome, or a 504 once `timeout` passes.
    pub async fn infer(&self, items: Vec<Item>, timeout: Duration) -> Result<Vec<ItemOutcome>, SubmitError> {
        let deadline = Instant::now() + timeout;
        let receivers = self.batcher.submit(items)?;
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
            outcomes.push(outcome);
        }
        Ok(outcomes)
    }
}

#[derive(Default)]
struct PipelineTemplateBuilder {
    preprocess: Option<Arc<StageTemplate>>,
    predict: Option<Arc<StageTemplate>>,
    postprocess: Option<Arc<StageTemplate>>,
}
