//! A model version's metadata and readiness as every edge reports them.

use super::infer::{find, Found};
use super::ServeError;
use crate::model::config::TensorSpec;
use crate::protocol::{ModelMetadata, TensorMetadata};
use crate::serving::{Repository, RepositoryError};

/// The model's declared inputs and outputs, and the metadata its plugins declared (a
/// model on standby: what they declared when it was last resident). Never loads it.
pub fn model_metadata(model: &Found) -> ModelMetadata {
    let config = model.config();
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
        parameters: model.declared_metadata(),
    }
}

/// Whether `name` (at `version`, if given) is ready: it serves that version, or is on
/// standby (its next request loads it), and the server is not draining. A model still
/// loading is not ready; one the server does not know (or a version it does not serve)
/// is an error. Never loads it.
pub fn model_ready(repository: &Repository, name: &str, version: Option<&str>) -> Result<bool, ServeError> {
    match find(repository, name, version) {
        Ok(model) => Ok(repository.model_ready(&model.config().name)),
        Err(ServeError::ModelNotReady(_) | ServeError::Repository(RepositoryError::Broken { .. })) => Ok(false),
        Err(e) => Err(e),
    }
}
