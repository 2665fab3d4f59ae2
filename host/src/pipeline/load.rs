//! Loading a model version: `model.toml` parsed, every stage compiled, and every
//! instance created and initialised — everything needed to run it, and nothing that
//! serves it (no threads, no batcher, no async runtime). The serving layer starts what
//! this yields; `tensorplug check` only loads.

use std::path::Path;
use std::sync::Arc;

use super::{PipelineInstance, PipelineTemplate};
use crate::model::config::{ConfigError, ModelConfig, MODEL_FILE};
use crate::model::StageKind;
use crate::runtime::nn::{GraphLimits, ModelGraphs};
use crate::runtime::{ModelShared, Runtime, RuntimeError, SandboxLimits, StageTag, StageTemplate};

/// Why a model version could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
}

/// A model version, compiled and initialised, ready to run.
pub struct LoadedModel {
    pub config: ModelConfig,
    /// The initialised pipeline instances it starts with.
    pub instances: Vec<PipelineInstance>,
    /// What more instances are made from.
    pub template: Arc<PipelineTemplate>,
    /// The metrics and metadata its plugins declared (metadata during `init`).
    pub shared: Arc<ModelShared>,
}

impl LoadedModel {
    /// Loads the model folder `dir` with the instances `starting` says for its limits (at
    /// least one, at most `limits.instances`). Blocking: compiles wasm and runs every
    /// stage's `init`, so call it from a thread that may block.
    pub fn load(
        runtime: &Runtime,
        dir: &Path,
        starting: impl FnOnce(&crate::model::config::Limits) -> usize,
    ) -> Result<Self, LoadError> {
        let config = ModelConfig::load(dir)?;
        let starting = starting(&config.limits).clamp(1, config.limits.instances);
        let limits = SandboxLimits {
            memory_bytes: config.limits.memory_bytes,
            table_elements: config.limits.table_elements,
            max_handles: config.limits.max_handles,
            call_timeout: config.limits.stage_timeout,
            init_timeout: config.limits.init_timeout,
            compile_timeout: config.limits.compile_timeout,
        };
        let (model, version): (Arc<str>, Arc<str>) = (config.name.as_str().into(), config.version.as_str().into());
        // Graphs first: parsed, optimised and planned once for every instance.
        let graph_limits = GraphLimits {
            memory_bytes: config.limits.graph_memory_bytes,
            max_nodes: config.limits.graph_max_nodes,
            value_bytes: config.limits.memory_bytes as u64,
        };
        let graphs = ModelGraphs::load(&config.dir, &config.graphs, graph_limits).map_err(RuntimeError::from)?;
        let mut shared = ModelShared::with_graphs(graphs);
        shared.metrics = runtime.plugin_metrics(&model, &version);
        let shared = Arc::new(shared);
        let (mut preprocess, mut predict, mut postprocess) = (None, None, None);
        for (kind, file) in &config.stages {
            let tag = StageTag {
                model: model.clone(),
                version: version.clone(),
                stage: kind.name(),
                shared: shared.clone(),
            };
            let stage = StageTemplate::load(runtime, *kind, file, &config.dir, tag, limits, &config.parameters)?;
            let slot = match kind {
                StageKind::Preprocess => &mut preprocess,
                StageKind::Predict => &mut predict,
                StageKind::Postprocess => &mut postprocess,
            };
            *slot = Some(stage);
        }
        let compiles = [&preprocess, &predict, &postprocess]
            .into_iter()
            .flatten()
            .map(|stage: &Arc<StageTemplate>| (stage.kind().name(), stage.compiled()))
            .collect();
        let _ = shared.compiles.set(compiles);
        let template = Arc::new(PipelineTemplate {
            preprocess,
            predict: predict.ok_or_else(|| ConfigError {
                file: config.dir.join(MODEL_FILE),
                message: "key `stages.predict` is required".into(),
            })?,
            postprocess,
            outputs: config.outputs.clone(),
            padding: config.padding.clone(),
        });
        let instances = (0..starting)
            .map(|_| template.instantiate())
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            config,
            instances,
            template,
            shared,
        })
    }

    /// The stages with the `tensorplug:plugin` version each was built against, as
    /// `preprocess (WIT 0.2.0) -> predict (WIT 0.1.0) -> ...`, and the graphs.
    pub fn describe(&self) -> String {
        let stages: Vec<String> = match self.instances.first() {
            Some(instance) => {
                let t = &instance.template;
                let templates = t.preprocess.iter().chain([&t.predict]).chain(t.postprocess.iter());
                templates
                    .map(|stage| format!("{} (WIT {})", stage.kind().name(), stage.wit_version()))
                    .collect()
            }
            None => self
                .config
                .stages
                .iter()
                .map(|(kind, _)| kind.name().to_string())
                .collect(),
        };
        let mut text = format!("version {}: {}", self.config.version, stages.join(" -> "));
        if !self.shared.graphs.is_empty() {
            text.push_str(&format!(
                "; graphs: {} ({} bytes)",
                self.shared.graphs.names().join(", "),
                self.shared.graphs.bytes()
            ));
        }
        text
    }
}
