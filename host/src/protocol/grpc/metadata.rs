//! `ModelMetadataResponse`: a model's metadata, as a server writes it.

use super::proto::infer_parameter::ParameterChoice;
use super::proto::model_metadata_response::TensorMetadata;
use super::proto::{InferParameter, ModelMetadataResponse};
use crate::protocol::ModelMetadata;

/// `metadata` as its message; its parameters are strings.
pub fn write_metadata(metadata: ModelMetadata) -> ModelMetadataResponse {
    let describe = |tensors: Vec<crate::protocol::TensorMetadata>| {
        tensors
            .into_iter()
            .map(|tensor| TensorMetadata {
                name: tensor.name,
                datatype: tensor.datatype.as_str().to_owned(),
                shape: tensor.shape,
            })
            .collect()
    };
    ModelMetadataResponse {
        name: metadata.name,
        versions: metadata.versions,
        platform: metadata.platform,
        inputs: describe(metadata.inputs),
        outputs: describe(metadata.outputs),
        parameters: metadata
            .parameters
            .into_iter()
            .map(|(key, value)| {
                let value = InferParameter {
                    parameter_choice: Some(ParameterChoice::StringParam(value)),
                };
                (key, value)
            })
            .collect(),
    }
}
