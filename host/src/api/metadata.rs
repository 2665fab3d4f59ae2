//! A model version's metadata and readiness as every edge reports them.

use super::{find_model, ServeError};
use crate::model::config::TensorSpec;
use crate::protocol::{ModelMetadata, TensorMetadata};
use crate::serving::{Model, Repository};

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

/// Whether `name` (at `version`, if given) is ready: it serves that version and the server
/// is not draining. A model still loading is not ready; one the server does not know (or
/// a version it does not serve) is an error.
pub fn model_ready(repository: &Repository, name: &str, version: Option<&str>) -> Result<bool, ServeError> {
    match find_model(repository, name, version) {
        Ok(model) => Ok(repository.model_ready(&model.config.name)),
        Err(ServeError::ModelNotReady(_)) => Ok(false),
        Err(e) => Err(e),
    }
}
