//! A model version's metadata and readiness as every edge reports them.

use crate::model::config::TensorSpec;
use crate::protocol::{ModelMetadata, TensorMetadata};
use crate::serving::Model;

/// The model's declared inputs and outputs, and the metadata its plugins declared.
pub fn model_metadata(model: &Model) -> ModelMetadata {
    let config = &model.config;
    let describe = |specs: &[TensorSpec]| {
        specs
            .iter()
            .map(|spec| TensorMetadata {
                name: spec.name.clone(),
                datatype: spec.datatype,
                shape: config.metadata_shape(spec),
            })
            .collect()
    };
    ModelMetadata {
        name: config.name.clone(),
        versions: vec![config.version.clone()],
        platform: "tensorplug_wasm".into(),
        inputs: describe(&config.inputs),
        outputs: describe(&config.outputs),
        parameters: model.shared.metadata(),
    }
}
