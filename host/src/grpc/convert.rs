//! The edge's side of the message conversions of [`crate::protocol::grpc`]: a request
//! whose message is wrong as a [`ServeError`], and a served model's answer and metadata.

use crate::api::ServeError;
use crate::model::tensor::Tensor;
use crate::protocol::grpc::proto::{ModelInferRequest, ModelInferResponse, ModelMetadataResponse};
use crate::protocol::grpc::{read_request, write_metadata, write_response, MessageError};
use crate::protocol::InferRequest;
use crate::serving::Model;

/// A `ModelInferRequest` as a validated [`InferRequest`].
pub fn request(message: ModelInferRequest) -> Result<InferRequest, ServeError> {
    read_request(message).map_err(|error| match error {
        MessageError::Protocol(error) => ServeError::Protocol(error),
        // How the message lays its tensors out: unreadable, as a malformed body is.
        error => ServeError::Unreadable(error.to_string()),
    })
}

/// A successful answer of `model`.
pub fn response(model: &Model, id: Option<String>, outputs: Vec<Tensor>) -> ModelInferResponse {
    write_response(model.config.name.clone(), model.config.version.clone(), id, outputs)
}

/// A model's metadata, as every edge reports it ([`crate::api::model_metadata`]).
pub fn metadata(model: &crate::api::Found) -> ModelMetadataResponse {
    write_metadata(crate::api::model_metadata(model))
}
