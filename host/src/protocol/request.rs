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
//! UTF-8 bytes). Unknown fields and unknown parameters are ignored.
//!
//! Memory: the JSON is read in one streaming pass (see [`super::parse`]); client fields
//! are read from their raw text into typed values under the caps of [`super::limits`];
//! no buffer is reserved beyond what the body's bytes can fill. What a request holds
//! while it decodes is therefore its body, its decoded tensors (at most 4 bytes of
//! tensor per byte of JSON text, for 8-byte datatypes written as `1,`), and a bounded
//! amount per input.

use std::collections::HashSet;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::Number;

use super::data::{DataSeed, DataState};
use super::error::{render_raw, ProtocolError};
use super::limits::{MAX_DIMS, MAX_ID_BYTES, MAX_NAME_BYTES, MAX_OUTPUTS, MAX_PARAMETERS, MAX_PARAMETER_STRING_BYTES};
use super::parameters::{ParameterValue, Parameters};
use super::parse::{self, known_datatype, RawBody, RawData, RawFields, RawInput, RawInputs, Skip};
use crate::model::tensor::{bytes_element_offsets, element_count, DataType, Tensor};

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
    pub parameters: Parameters,
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
            Some(ParameterValue::Number(n)) if n.as_u64().is_some() => Ok(n.as_u64()),
            Some(other) => Err(ProtocolError::WrongType {
                at: String::from("request"),
                what: String::from("parameter \"timeout\""),
                expected: "a non-negative integer (microseconds)",
                found: render_parameter(other),
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
        matches!(
            self.parameters.get("binary_data_output"),
            Some(ParameterValue::Bool(true))
        )
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
    // Checked once up front (fast), so no string anywhere in the JSON, read or skipped,
    // can smuggle invalid UTF-8 through.
    let json = std::str::from_utf8(json).map_err(|e| ProtocolError::InvalidUtf8 {
        offset: e.valid_up_to(),
    })?;
    let raw = match parse::parse(json)? {
        RawBody::Request(raw) => raw,
        RawBody::NotObject(found) => {
            let found = if found.get().starts_with('[') {
                String::from("an array")
            } else {
                render_raw(found)
            };
            return Err(wrong_type("request", "the body", "a JSON object", found));
        }
    };
    if let Some(field) = raw.duplicate {
        return Err(ProtocolError::DuplicateField {
            at: String::from("request"),
            field,
        });
    }
    let id = raw
        .id
        .map(|id| read_string(id, MAX_ID_BYTES, "request", "\"id\""))
        .transpose()?;
    let parameters = read_parameters(raw.parameters, "request")?;
    if let Some(v) = parameters.get("binary_data_output") {
        if !matches!(v, ParameterValue::Bool(_)) {
            return Err(wrong_type(
                "request",
                "parameters.binary_data_output",
                "true or false",
                render_parameter(v),
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

/// A JSON string of at most `limit` bytes, read from its raw text.
fn read_string(raw: &RawValue, limit: usize, at: &str, what: &'static str) -> Result<String, ProtocolError> {
    let text = raw.get();
    if !text.starts_with('"') {
        return Err(wrong_type(at, what, "a string", render_raw(raw)));
    }
    let too_long = |len| ProtocolError::TooLong {
        at: at.to_owned(),
        what,
        len,
        limit,
    };
    // An escape (`\u00e9`) is at most six characters of text for every byte it stands
    // for, so text this long holds more than `limit` bytes: refuse before decoding it.
    let written = text.len() - 2;
    if written > limit.saturating_mul(6) {
        return Err(too_long(written));
    }
    let value: String = serde_json::from_str(text).map_err(|e| ProtocolError::json(&e))?;
    if value.len() > limit {
        return Err(too_long(value.len()));
    }
    Ok(value)
}

/// Renders a parameter's value for a message (a string quoted and clipped).
pub fn render_parameter(value: &ParameterValue) -> String {
    match value {
        ParameterValue::Null => String::from("null"),
        ParameterValue::Bool(b) => b.to_string(),
        ParameterValue::Number(n) => n.to_string(),
        ParameterValue::String(s) => super::error::render_str(s),
        ParameterValue::Structured => String::from("an array or object"),
    }
}

/// Reads a JSON value of a kind the caller checked, reporting a malformed one as JSON.
fn typed<'de, T: serde::Deserialize<'de>>(raw: &'de RawValue) -> Result<T, ProtocolError> {
    serde_json::from_str(raw.get()).map_err(|e| ProtocolError::json(&e))
}

/// Walks an array or object the client nested somewhere it is not read, so the parser's
/// depth limit holds there too.
fn check_nesting(raw: &RawValue) -> Result<(), ProtocolError> {
    let mut de = serde_json::Deserializer::from_str(raw.get());
    Skip.deserialize(&mut de).map_err(|e| ProtocolError::json(&e))
}

/// A parameter's value from its raw text.
fn parameter_value(raw: &RawValue, at: &str) -> Result<ParameterValue, ProtocolError> {
    let text = raw.get();
    Ok(match text.as_bytes().first() {
        Some(b'"') => ParameterValue::String(read_string(raw, MAX_PARAMETER_STRING_BYTES, at, "a parameter value")?),
        Some(b't' | b'f') => ParameterValue::Bool(typed(raw)?),
        Some(b'n') => ParameterValue::Null,
        Some(b'[' | b'{') => {
            check_nesting(raw)?;
            ParameterValue::Structured
        }
        _ => ParameterValue::Number(typed::<Number>(raw)?),
    })
}

/// The fields of a JSON object, as raw values, at most `limit` of them, with names of at
/// most [`MAX_NAME_BYTES`]; `None` when the value is not an object.
fn object_fields<'de>(
    raw: &'de RawValue,
    at: &str,
    limit: usize,
) -> Result<Option<Vec<(String, &'de RawValue)>>, ProtocolError> {
    if !raw.get().starts_with('{') {
        return Ok(None);
    }
    let mut refused = None;
    let mut de = serde_json::Deserializer::from_str(raw.get());
    let fields = de
        .deserialize_map(Fields {
            limit,
            at,
            refused: &mut refused,
        })
        .map_err(|e| refused.take().unwrap_or_else(|| ProtocolError::json(&e)))?;
    Ok(Some(fields))
}

struct Fields<'a> {
    limit: usize,
    at: &'a str,
    refused: &'a mut Option<ProtocolError>,
}

impl<'de> Visitor<'de> for Fields<'_> {
    type Value = Vec<(String, &'de RawValue)>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut fields: Vec<(String, &'de RawValue)> = Vec::new();
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if fields.len() == self.limit {
                *self.refused = Some(ProtocolError::TooMany {
                    at: self.at.to_owned(),
                    what: "fields or parameters",
                    limit: self.limit,
                });
                return Err(A::Error::custom("too many fields"));
            }
            if key.len() > MAX_NAME_BYTES {
                *self.refused = Some(ProtocolError::TooLong {
                    at: self.at.to_owned(),
                    what: "a field or parameter name",
                    len: key.len(),
                    limit: MAX_NAME_BYTES,
                });
                return Err(A::Error::custom("name too long"));
            }
            let value: &'de RawValue = map.next_value()?;
            fields.push((key.into_owned(), value));
        }
        Ok(fields)
    }
}

/// An optional `parameters` object (absent: empty).
fn read_parameters(raw: Option<&RawValue>, at: &str) -> Result<Parameters, ProtocolError> {
    let Some(raw) = raw else {
        return Ok(Parameters::default());
    };
    let Some(fields) = object_fields(raw, at, MAX_PARAMETERS)? else {
        return Err(wrong_type(at, "\"parameters\"", "a JSON object", render_raw(raw)));
    };
    let mut parameters = Vec::with_capacity(fields.len());
    for (name, value) in fields {
        if parameters.iter().any(|(n, _)| *n == name) {
            return Err(ProtocolError::DuplicateParameter {
                at: at.to_owned(),
                name: super::error::render_str(&name),
            });
        }
        let value = parameter_value(value, at)?;
        parameters.push((name, value));
    }
    Ok(Parameters(parameters))
}

/// The `name` field of `inputs[i]` / `outputs[i]`.
fn name_of(value: Option<&RawValue>, position: &str) -> Result<String, ProtocolError> {
    match value {
        Some(raw) => read_string(raw, MAX_NAME_BYTES, position, "\"name\""),
        None => Err(ProtocolError::MissingField {
            at: position.to_owned(),
            field: "\"name\"",
        }),
    }
}

pub(super) fn reject_unsupported(parameters: &Parameters, at: &str) -> Result<(), ProtocolError> {
    match parameters.first_of(&UNSUPPORTED_PARAMETERS) {
        Some(parameter) => Err(ProtocolError::Unsupported {
            at: at.to_owned(),
            parameter: parameter.to_owned(),
        }),
        None => Ok(()),
    }
}

fn convert_input(index: usize, raw: RawInput<'_>, has_binary: bool) -> Result<PendingInput, ProtocolError> {
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
    let Some(datatype) = known_datatype(datatype_value.get()) else {
        return Err(ProtocolError::UnknownDatatype {
            name,
            found: render_raw(datatype_value),
        });
    };
    let shape = shape_of(fields.shape, &name, &at)?;
    let parameters = read_parameters(fields.parameters, &at)?;
    reject_unsupported(&parameters, &at)?;
    let binary_size = match parameters.get("binary_data_size") {
        None => None,
        Some(ParameterValue::Number(n)) if n.as_u64().is_some() => n.as_u64(),
        Some(other) => {
            return Err(wrong_type(
                &at,
                "parameters.binary_data_size",
                "a non-negative integer",
                render_parameter(other),
            ))
        }
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
                found: render_raw(datatype_value),
            });
        }
        (None, RawData::Buffered(value)) => {
            // The data came before the datatype: decoded now, from its text in the body,
            // with nothing reserved ahead.
            let mut state = DataState::new(datatype, 0);
            let mut de = serde_json::Deserializer::from_str(value.get());
            DataSeed(&mut state)
                .deserialize(&mut de)
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

/// The elements of a JSON array, as raw values, at most `limit` of them; `None` when
/// the value is not an array.
fn array_elements<'de>(
    raw: &'de RawValue,
    at: &str,
    what: &'static str,
    limit: usize,
) -> Result<Option<Vec<&'de RawValue>>, ProtocolError> {
    if !raw.get().starts_with('[') {
        return Ok(None);
    }
    let mut refused = None;
    let mut de = serde_json::Deserializer::from_str(raw.get());
    let elements = de
        .deserialize_seq(Elements {
            limit,
            at,
            what,
            refused: &mut refused,
        })
        .map_err(|e| refused.take().unwrap_or_else(|| ProtocolError::json(&e)))?;
    Ok(Some(elements))
}

struct Elements<'a> {
    limit: usize,
    at: &'a str,
    what: &'static str,
    refused: &'a mut Option<ProtocolError>,
}

impl<'de> Visitor<'de> for Elements<'_> {
    type Value = Vec<&'de RawValue>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON array")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut elements = Vec::new();
        while let Some(element) = seq.next_element::<&'de RawValue>()? {
            if elements.len() == self.limit {
                *self.refused = Some(ProtocolError::TooMany {
                    at: self.at.to_owned(),
                    what: self.what,
                    limit: self.limit,
                });
                return Err(A::Error::custom("too many elements"));
            }
            elements.push(element);
        }
        Ok(elements)
    }
}

/// Validates `shape`: present, an array of at most [`MAX_DIMS`] non-negative integers.
fn shape_of(value: Option<&RawValue>, name: &str, at: &str) -> Result<Vec<u64>, ProtocolError> {
    let Some(value) = value else {
        return Err(ProtocolError::MissingField {
            at: at.to_owned(),
            field: "\"shape\"",
        });
    };
    let not_integers = || wrong_type(at, "\"shape\"", "an array of non-negative integers", render_raw(value));
    let Some(dims) = array_elements(value, at, "shape dimensions", MAX_DIMS)? else {
        return Err(not_integers());
    };
    let mut signed = Vec::with_capacity(dims.len());
    for d in dims {
        match serde_json::from_str::<i128>(d.get()) {
            Ok(d) if d <= i128::from(u64::MAX) && d >= i128::from(i64::MIN) => signed.push(d),
            _ => return Err(not_integers()),
        }
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
fn convert_outputs(value: Option<&RawValue>) -> Result<Vec<RequestedOutput>, ProtocolError> {
    let Some(value) = value else {
        return Ok(Vec::new());
    };
    let Some(items) = array_elements(value, "request", "requested outputs", MAX_OUTPUTS)? else {
        return Err(wrong_type("request", "\"outputs\"", "an array", render_raw(value)));
    };
    let mut outputs: Vec<RequestedOutput> = Vec::with_capacity(items.len());
    let mut names = HashSet::with_capacity(items.len());
    for (index, item) in items.into_iter().enumerate() {
        let position = format!("outputs[{index}]");
        let Some(fields) = object_fields(item, &position, MAX_PARAMETERS)? else {
            return Err(wrong_type(
                &position,
                "each requested output",
                "a JSON object",
                render_raw(item),
            ));
        };
        let field = |key: &str| fields.iter().find(|(k, _)| k == key).map(|(_, v)| *v);
        for (key, value) in &fields {
            if key != "name" && key != "parameters" && matches!(value.get().as_bytes().first(), Some(b'[' | b'{')) {
                check_nesting(value)?;
            }
        }
        let name = name_of(field("name"), &position)?;
        let at = format!("output '{name}'");
        let parameters = read_parameters(field("parameters"), &at)?;
        reject_unsupported(&parameters, &at)?;
        let binary_data = match parameters.get("binary_data") {
            None => None,
            Some(ParameterValue::Bool(b)) => Some(*b),
            Some(other) => {
                return Err(wrong_type(
                    &at,
                    "parameters.binary_data",
                    "true or false",
                    render_parameter(other),
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
