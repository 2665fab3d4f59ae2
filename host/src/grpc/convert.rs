//! Protobuf messages ↔ the protocol's and the model's types.

use std::collections::HashMap;

use super::proto::infer_parameter::ParameterChoice;
use super::proto::model_infer_request::InferInputTensor;
use super::proto::model_infer_response::InferOutputTensor;
use super::proto::model_metadata_response::TensorMetadata;
use super::proto::{InferParameter, InferTensorContents, ModelInferRequest, ModelInferResponse, ModelMetadataResponse};
use crate::api::ServeError;
use crate::model::tensor::Tensor;
use crate::protocol::{InferRequest, InputData, InputParts, OutputParts, ParameterValue, RequestParts};
use crate::serving::Model;

/// A `ModelInferRequest` as a validated [`InferRequest`].
pub fn request(mut message: ModelInferRequest) -> Result<InferRequest, ServeError> {
    let raw = std::mem::take(&mut message.raw_input_contents);
    if !raw.is_empty() && raw.len() != message.inputs.len() {
        return Err(ServeError::Unreadable(format!(
            "raw_input_contents has {} entries for {} inputs: give one per input, in input order (or none)",
            raw.len(),
            message.inputs.len()
        )));
    }
    let mut raw = raw.into_iter();
    let mut inputs = Vec::with_capacity(message.inputs.len());
    for input in message.inputs {
        let InferInputTensor {
            name,
            datatype,
            shape,
            parameters: input_parameters,
            contents,
        } = input;
        let data = match raw.next() {
            Some(bytes) => {
                if contents.as_ref().is_some_and(has_values) {
                    return Err(ServeError::Unreadable(format!(
                        "input '{}': has both contents and raw_input_contents",
                        crate::protocol::clip(&name)
                    )));
                }
                InputData::Raw(bytes)
            }
            None => typed(&datatype, contents.unwrap_or_default()),
        };
        inputs.push(InputParts {
            name,
            datatype,
            shape,
            parameters: parameters(input_parameters),
            data,
        });
    }
    let outputs = message
        .outputs
        .into_iter()
        .map(|o| OutputParts {
            name: o.name,
            parameters: parameters(o.parameters),
        })
        .collect();
    Ok(InferRequest::from_parts(RequestParts {
        id: Some(message.id),
        parameters: parameters(message.parameters),
        inputs,
        outputs,
    })?)
}

fn has_values(c: &InferTensorContents) -> bool {
    !(c.bool_contents.is_empty()
        && c.int_contents.is_empty()
        && c.int64_contents.is_empty()
        && c.uint_contents.is_empty()
        && c.uint64_contents.is_empty()
        && c.fp32_contents.is_empty()
        && c.fp64_contents.is_empty()
        && c.bytes_contents.is_empty())
}

/// The typed field that holds `datatype`'s values (unknown datatypes are refused by
/// the protocol's checks, whatever the data).
fn typed(datatype: &str, c: InferTensorContents) -> InputData {
    match datatype {
        "BOOL" => InputData::Bool(c.bool_contents),
        "INT8" | "INT16" | "INT32" => InputData::Int(c.int_contents),
        "INT64" => InputData::Int64(c.int64_contents),
        "UINT8" | "UINT16" | "UINT32" => InputData::Uint(c.uint_contents),
        "UINT64" => InputData::Uint64(c.uint64_contents),
        "FP32" => InputData::Fp32(c.fp32_contents),
        "FP64" => InputData::Fp64(c.fp64_contents),
        "BYTES" => InputData::Bytes(c.bytes_contents),
        _ => InputData::Raw(Vec::new()),
    }
}

/// A parameters map as the protocol's list, sorted by name (so messages are stable).
fn parameters(map: HashMap<String, InferParameter>) -> Vec<(String, ParameterValue)> {
    let mut list: Vec<(String, ParameterValue)> = map
        .into_iter()
        .map(|(name, p)| {
            let value = match p.parameter_choice {
                None => ParameterValue::Null,
                Some(ParameterChoice::BoolParam(b)) => ParameterValue::Bool(b),
                Some(ParameterChoice::Int64Param(i)) => ParameterValue::Number(i.into()),
                Some(ParameterChoice::Uint64Param(u)) => ParameterValue::Number(u.into()),
                Some(ParameterChoice::StringParam(s)) => ParameterValue::String(s),
                Some(ParameterChoice::DoubleParam(d)) => {
                    serde_json::Number::from_f64(d).map_or(ParameterValue::Null, ParameterValue::Number)
                }
            };
            (name, value)
        })
        .collect();
    list.sort_by(|a, b| a.0.cmp(&b.0));
    list
}

/// A successful answer: every output's data in `raw_output_contents` (as Triton answers).
pub fn response(model: &Model, id: Option<String>, outputs: Vec<Tensor>) -> ModelInferResponse {
    answer(model.config.name.clone(), model.config.version.clone(), id, outputs)
}

/// [`response`] for any model name and version.
pub fn answer(
    model_name: String,
    model_version: String,
    id: Option<String>,
    outputs: Vec<Tensor>,
) -> ModelInferResponse {
    let mut message = ModelInferResponse {
        model_name,
        model_version,
        id: id.unwrap_or_default(),
        parameters: HashMap::new(),
        outputs: Vec::with_capacity(outputs.len()),
        raw_output_contents: Vec::with_capacity(outputs.len()),
    };
    for tensor in outputs {
        message.outputs.push(InferOutputTensor {
            name: tensor.name,
            datatype: tensor.datatype.as_str().to_owned(),
            shape: tensor
                .shape
                .iter()
                .map(|&d| i64::try_from(d).unwrap_or(i64::MAX))
                .collect(),
            parameters: HashMap::new(),
            contents: None,
        });
        message.raw_output_contents.push(tensor.data);
    }
    message
}

/// A model's metadata, as every edge reports it ([`crate::api::model_metadata`]).
pub fn metadata(model: &Model) -> ModelMetadataResponse {
    let metadata = crate::api::model_metadata(model);
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
