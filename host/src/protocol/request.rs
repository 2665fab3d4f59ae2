//! V2 inference requests: [`decode_request`] turns a REST body (JSON, or JSON followed by
//! binary tensor data) into an [`InferRequest`] of validated [`Tensor`]s.
//!
//! Binary tensor data extension: when the `Inference-Header-Content-Length` header is
//! present, the first that many bytes are the JSON and the rest is the binary data of the
//! inputs whose `parameters.binary_data_size` is set, concatenated in input order; the
//! sizes must add up to the rest exactly.
//!
//! JSON `data` may be flat or nested to any depth; only the total element count is checked
//! against the shape (row-major order is assumed, nesting is not checked against the
//! shape). Integer datatypes accept any JSON number with an integral value in range
//! (`3` or `3.0`); BOOL accepts `true`/`false`; BYTES accepts strings (stored as their
//! UTF-8 bytes). Unknown fields and unknown input parameters are ignored.

use std::collections::HashSet;

use serde::de::DeserializeSeed;
use serde_json::{Map, Value};

use super::data::{DataSeed, DataState};
use super::error::{render_value, ProtocolError};
use super::parse::{self, RawBody, RawData, RawFields, RawInput, RawInputs};
use crate::tensor::{bytes_element_offsets, element_count, DataType, Tensor};

/// Parameters of the shared-memory and classification extensions, which are not supported
/// and are rejected rather than silently ignored.
const UNSUPPORTED_PARAMETERS: [&str; 4] = [
    "shared_memory_region",
    "shared_memory_byte_size",
    "shared_memory_offset",
    "classification",
];

/// A decoded V2 inference request.
#[derive(Clone, Debug, PartialEq)]
pub struct InferRequest {
    pub id: Option<String>,
    /// Validated inputs, in request order, with unique names.
    pub inputs: Vec<Tensor>,
    /// Requested outputs, in request order, with unique names (empty: all outputs).
    pub outputs: Vec<RequestedOutput>,
    /// Request-level parameters (`timeout`, `binary_data_output`, ...), as sent.
    pub parameters: Map<String, Value>,
}

/// One entry of the request's `outputs`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestedOutput {
    pub name: String,
    /// The output's `parameters.binary_data`, if given.
    pub binary_data: Option<bool>,
}

impl InferRequest {
    /// The `timeout` request parameter in microseconds (as Triton reads it), if present.
    pub fn timeout_us(&self) -> Result<Option<u64>, ProtocolError> {
        match self.parameters.get("timeout") {
            None => Ok(None),
            Some(v) => v.as_u64().map(Some).ok_or_else(|| ProtocolError::WrongType {
                at: String::from("request"),
                what: String::from("parameter \"timeout\""),
                expected: "a non-negative integer (microseconds)",
                found: render_value(v),
            }),
        }
    }

    /// Whether output `name` should be returned as binary data: its own
    /// `parameters.binary_data` if the request lists it with one, else the request's
    /// `parameters.binary_data_output`, else `false`.
    pub fn binary_output(&self, name: &str) -> bool {
        self.outputs
            .iter()
            .find(|o| o.name == name)
            .and_then(|o| o.binary_data)
            .unwrap_or_else(|| self.binary_output_default())
    }

    /// The request's `parameters.binary_data_output` (`false` if absent).
    pub fn binary_output_default(&self) -> bool {
        self.parameters
            .get("binary_data_output")
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }
}

/// Decodes a V2 REST inference request body.
///
/// `json_header_len` is the `Inference-Header-Content-Length` header, if the request has
/// one. Every returned tensor has passed [`Tensor::validate`].
pub fn decode_request(body: &[u8], json_header_len: Option<usize>) -> Result<InferRequest, ProtocolError> {
    let (json, binary) = match json_header_len {
        None => (body, &[][..]),
        Some(n) => body.split_at_checked(n).ok_or(ProtocolError::HeaderLengthExceedsBody {
            header_len: n,
            body_len: body.len(),
        })?,
    };
    let raw = match parse::parse(json)? {
        RawBody::Request(raw) => raw,
        RawBody::NotObject(found) => return Err(wrong_type("request", "the body", "a JSON object", found)),
    };
    if let Some(field) = raw.duplicate {
        return Err(ProtocolError::DuplicateField {
            at: String::from("request"),
            field,
        });
    }
    let id = match raw.id {
        None => None,
        Some(Value::String(id)) => Some(id),
        Some(other) => return Err(wrong_type("request", "\"id\"", "a string", render_value(&other))),
    };
    let parameters = object(raw.parameters, "request", "\"parameters\"")?;
    if let Some(v) = parameters.get("binary_data_output") {
        if !v.is_boolean() {
            return Err(wrong_type(
                "request",
                "parameters.binary_data_output",
                "true or false",
                render_value(v),
            ));
        }
    }
    let raw_inputs = match raw.inputs {
        None => {
            return Err(ProtocolError::MissingField {
                at: String::from("request"),
                field: "\"inputs\"",
            })
        }
        Some(RawInputs::NotArray(found)) => return Err(wrong_type("request", "\"inputs\"", "an array", found)),
        Some(RawInputs::List(list)) => list,
    };

    let mut pending = Vec::with_capacity(raw_inputs.len());
    let mut names = HashSet::with_capacity(raw_inputs.len());
    for (index, raw_input) in raw_inputs.into_iter().enumerate() {
        let input = convert_input(index, raw_input, json_header_len.is_some())?;
        if !names.insert(input.tensor.name.clone()) {
            return Err(ProtocolError::DuplicateInput(input.tensor.name));
        }
        pending.push(input);
    }
    attach_binary(&mut pending, binary)?;
    let mut inputs = Vec::with_capacity(pending.len());
    for input in pending {
        input.tensor.validate()?;
        inputs.push(input.tensor);
    }

    Ok(InferRequest {
        id,
        inputs,
        outputs: convert_outputs(raw.outputs)?,
        parameters,
    })
}

/// An input whose binary data (if any) is still in the body's tail.
struct PendingInput {
    tensor: Tensor,
    binary_size: Option<u64>,
}

fn wrong_type(at: &str, what: &str, expected: &'static str, found: String) -> ProtocolError {
    ProtocolError::WrongType {
        at: at.to_owned(),
        what: what.to_owned(),
        expected,
        found,
    }
}

/// An optional JSON object field (absent: empty).
fn object(value: Option<Value>, at: &str, what: &str) -> Result<Map<String, Value>, ProtocolError> {
    match value {
        None => Ok(Map::new()),
        Some(Value::Object(map)) => Ok(map),
        Some(other) => Err(wrong_type(at, what, "a JSON object", render_value(&other))),
    }
}

/// The `name` field of `inputs[i]` / `outputs[i]`.
fn name_of(value: Option<Value>, position: &str) -> Result<String, ProtocolError> {
    match value {
        Some(Value::String(name)) => Ok(name),
        None => Err(ProtocolError::MissingField {
            at: position.to_owned(),
            field: "\"name\"",
        }),
        Some(other) => Err(wrong_type(position, "\"name\"", "a string", render_value(&other))),
    }
}

fn reject_unsupported(parameters: &Map<String, Value>, at: &str) -> Result<(), ProtocolError> {
    match UNSUPPORTED_PARAMETERS.iter().find(|p| parameters.contains_key(**p)) {
        Some(parameter) => Err(ProtocolError::Unsupported {
            at: at.to_owned(),
            parameter: (*parameter).to_owned(),
        }),
        None => Ok(()),
    }
}

fn convert_input(index: usize, raw: RawInput, has_binary: bool) -> Result<PendingInput, ProtocolError> {
    let position = format!("inputs[{index}]");
    let fields: RawFields = match raw {
        RawInput::Object(fields) => fields,
        RawInput::NotObject(found) => return Err(wrong_type(&position, "each input", "a JSON object", found)),
    };
    let name = name_of(fields.name, &position)?;
    let at = format!("input '{name}'");
    if let Some(field) = fields.duplicate {
        return Err(ProtocolError::DuplicateField { at, field });
    }
    let Some(datatype_value) = fields.datatype else {
        return Err(ProtocolError::MissingField {
            at,
            field: "\"datatype\"",
        });
    };
    let Some(datatype) = datatype_value.as_str().and_then(DataType::parse) else {
        return Err(ProtocolError::UnknownDatatype {
            name,
            found: render_value(&datatype_value),
        });
    };
    let shape = shape_of(fields.shape, &name, &at)?;
    let parameters = object(fields.parameters, &at, "\"parameters\"")?;
    reject_unsupported(&parameters, &at)?;
    let binary_size = match parameters.get("binary_data_size") {
        None => None,
        Some(v) => Some(v.as_u64().ok_or_else(|| {
            wrong_type(
                &at,
                "parameters.binary_data_size",
                "a non-negative integer",
                render_value(v),
            )
        })?),
    };

    let data = match (binary_size, fields.data) {
        (Some(_), RawData::Absent) if !has_binary => return Err(ProtocolError::BinaryWithoutHeader { name }),
        (Some(size), RawData::Absent) => {
            check_binary_size(&name, datatype, &shape, size)?;
            Vec::new()
        }
        (Some(_), _) => return Err(ProtocolError::DataAndBinary { name }),
        (None, RawData::Absent) => {
            return Err(ProtocolError::MissingField {
                at,
                field: "\"data\" (or parameters.binary_data_size)",
            })
        }
        (None, RawData::Skipped) => {
            // Only happens for an invalid datatype, which was rejected above.
            return Err(ProtocolError::UnknownDatatype {
                name,
                found: render_value(&datatype_value),
            });
        }
        (None, RawData::Buffered(value)) => {
            let mut state = DataState::new(datatype, 0);
            DataSeed(&mut state)
                .deserialize(value)
                .map_err(|e| ProtocolError::json(&e))?;
            json_data(&name, datatype, &shape, state)?
        }
        (None, RawData::Decoded(state)) => json_data(&name, datatype, &shape, state)?,
    };
    Ok(PendingInput {
        tensor: Tensor {
            name,
            datatype,
            shape,
            data,
        },
        binary_size,
    })
}

/// Validates `shape`: present, an array of non-negative integers.
fn shape_of(value: Option<Value>, name: &str, at: &str) -> Result<Vec<u64>, ProtocolError> {
    let Some(value) = value else {
        return Err(ProtocolError::MissingField {
            at: at.to_owned(),
            field: "\"shape\"",
        });
    };
    let not_integers = || {
        wrong_type(
            at,
            "\"shape\"",
            "an array of non-negative integers",
            render_value(&value),
        )
    };
    let Some(dims) = value.as_array() else {
        return Err(not_integers());
    };
    let mut signed = Vec::with_capacity(dims.len());
    for d in dims {
        let d = match (d.as_u64(), d.as_i64()) {
            (Some(u), _) => i128::from(u),
            (None, Some(i)) => i128::from(i),
            (None, None) => return Err(not_integers()),
        };
        signed.push(d);
    }
    if let Some(&dim) = signed.iter().find(|d| **d < 0) {
        return Err(ProtocolError::NegativeDimension {
            name: name.to_owned(),
            shape: format!("{signed:?}"),
            dim: i64::try_from(dim).unwrap_or(i64::MIN),
        });
    }
    Ok(signed
        .into_iter()
        .map(|d| u64::try_from(d).unwrap_or(u64::MAX))
        .collect())
}

/// The declared element count, or the shape-overflow error.
fn declared_count(name: &str, shape: &[u64]) -> Result<u64, ProtocolError> {
    element_count(shape).ok_or_else(|| ProtocolError::ShapeOverflow {
        name: name.to_owned(),
        shape: shape.to_vec(),
    })
}

fn count_mismatch(name: &str, datatype: DataType, shape: &[u64], expected: u64, actual: u64) -> ProtocolError {
    ProtocolError::ElementCount {
        name: name.to_owned(),
        shape: shape.to_vec(),
        datatype,
        expected,
        actual,
    }
}

/// Finishes JSON-decoded data: reports its first fault, then checks its element count.
fn json_data(name: &str, datatype: DataType, shape: &[u64], state: DataState) -> Result<Vec<u8>, ProtocolError> {
    let (bytes, count) = state.finish(name)?;
    let expected = declared_count(name, shape)?;
    if count != expected {
        return Err(count_mismatch(name, datatype, shape, expected, count));
    }
    Ok(bytes)
}

/// Checks a fixed-size input's declared binary size against its shape (BYTES inputs are
/// checked once their data is sliced out).
fn check_binary_size(name: &str, datatype: DataType, shape: &[u64], size: u64) -> Result<(), ProtocolError> {
    let Some(element_size) = datatype.element_size() else {
        return Ok(());
    };
    let expected = declared_count(name, shape)?
        .checked_mul(element_size as u64)
        .ok_or_else(|| ProtocolError::ShapeOverflow {
            name: name.to_owned(),
            shape: shape.to_vec(),
        })?;
    if expected != size {
        return Err(ProtocolError::BinarySize {
            name: name.to_owned(),
            shape: shape.to_vec(),
            datatype,
            expected,
            actual: size,
        });
    }
    Ok(())
}

/// Hands each binary input its slice of the body's tail, which must be used up exactly.
fn attach_binary(inputs: &mut [PendingInput], binary: &[u8]) -> Result<(), ProtocolError> {
    let declared: u128 = inputs.iter().filter_map(|i| i.binary_size).map(u128::from).sum();
    let total_error = || ProtocolError::BinaryTotal {
        declared,
        actual: binary.len(),
    };
    if declared != binary.len() as u128 {
        return Err(total_error());
    }
    let mut rest = binary;
    for input in inputs.iter_mut() {
        let Some(size) = input.binary_size else {
            continue;
        };
        let (chunk, tail) = usize::try_from(size)
            .ok()
            .and_then(|size| rest.split_at_checked(size))
            .ok_or_else(total_error)?;
        rest = tail;
        let tensor = &mut input.tensor;
        if tensor.datatype == DataType::Bytes {
            let offsets = bytes_element_offsets(chunk).map_err(|reason| ProtocolError::MalformedBytes {
                name: tensor.name.clone(),
                reason,
            })?;
            let found = offsets.len().saturating_sub(1) as u64;
            let expected = declared_count(&tensor.name, &tensor.shape)?;
            if found != expected {
                return Err(count_mismatch(
                    &tensor.name,
                    DataType::Bytes,
                    &tensor.shape,
                    expected,
                    found,
                ));
            }
        }
        tensor.data = chunk.to_vec();
    }
    Ok(())
}

/// Validates the request's `outputs` list.
fn convert_outputs(value: Option<Value>) -> Result<Vec<RequestedOutput>, ProtocolError> {
    let items = match value {
        None => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(other) => return Err(wrong_type("request", "\"outputs\"", "an array", render_value(&other))),
    };
    let mut outputs: Vec<RequestedOutput> = Vec::with_capacity(items.len());
    let mut names = HashSet::with_capacity(items.len());
    for (index, item) in items.into_iter().enumerate() {
        let position = format!("outputs[{index}]");
        let Value::Object(mut fields) = item else {
            return Err(wrong_type(
                &position,
                "each requested output",
                "a JSON object",
                render_value(&item),
            ));
        };
        let name = name_of(fields.remove("name"), &position)?;
        let at = format!("output '{name}'");
        let parameters = object(fields.remove("parameters"), &at, "\"parameters\"")?;
        reject_unsupported(&parameters, &at)?;
        let binary_data = match parameters.get("binary_data") {
            None => None,
            Some(Value::Bool(b)) => Some(*b),
            Some(other) => {
                return Err(wrong_type(
                    &at,
                    "parameters.binary_data",
                    "true or false",
                    render_value(other),
                ))
            }
        };
        if !names.insert(name.clone()) {
            return Err(ProtocolError::DuplicateOutput(name));
        }
        outputs.push(RequestedOutput { name, binary_data });
    }
    Ok(outputs)
}

#[cfg(test)]
#[path = "request_tests.rs"]
mod tests;
