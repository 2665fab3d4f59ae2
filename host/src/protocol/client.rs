//! The client's side of the REST wire format (what `tensorplug infer` speaks to a
//! server): [`encode_request`] writes a request body, JSON or JSON followed by binary
//! tensor data, and [`decode_answer`] reads an answer body (200, 207 or an error) back
//! into tensors.
//!
//! Answers are read with the same element rules as requests (see [`super::data`]), plus
//! one: `null` in float data is NaN, as the server writes non-finite floats.

use serde::de::DeserializeSeed;
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::value::RawValue;

use super::data::{DataSeed, DataState};
use super::error::ProtocolError;
use super::parameters::{ParameterValue, Parameters};
use super::request::InferRequest;
use super::tensor_json::JsonOutput;
use crate::model::outcome::{ItemError, ItemOutcome};
use crate::model::tensor::{bytes_element_offsets, DataType, Tensor};

/// An encoded request body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncodedRequest {
    pub body: Vec<u8>,
    /// Length of the JSON part when binary tensor data follows it: send it as the
    /// `Inference-Header-Content-Length` header. `None`: the whole body is JSON.
    pub json_header_len: Option<usize>,
}

/// How a request's tensors travel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BodyForm {
    /// Inputs as binary tensor data after the JSON.
    pub binary_inputs: bool,
    /// Ask for every output as binary data (request `binary_data_output`, and
    /// `binary_data` on each requested output); `false` asks for JSON outputs.
    pub binary_outputs: bool,
}

/// Encodes `request` as a V2 REST body. The request's own binary-output choices are
/// replaced by `form`'s.
pub fn encode_request(request: &InferRequest, form: BodyForm) -> EncodedRequest {
    let mut parameters = request.parameters.clone();
    if form.binary_outputs {
        parameters.set("binary_data_output", ParameterValue::Bool(true));
    } else {
        parameters.remove("binary_data_output");
    }
    let json = RequestJson {
        id: request.id.as_deref(),
        parameters: &parameters,
        inputs: request
            .inputs
            .iter()
            .map(|tensor| JsonOutput {
                tensor,
                binary: form.binary_inputs,
                leading_one: false,
            })
            .collect(),
        outputs: request
            .outputs
            .iter()
            .map(|o| RequestedJson {
                name: &o.name,
                binary: form.binary_outputs,
            })
            .collect(),
    };
    let mut body = serde_json::to_vec(&json).unwrap_or_default();
    if !form.binary_inputs {
        return EncodedRequest {
            body,
            json_header_len: None,
        };
    }
    let json_len = body.len();
    body.reserve(request.inputs.iter().map(|t| t.data.len()).sum());
    for tensor in &request.inputs {
        body.extend_from_slice(&tensor.data);
    }
    EncodedRequest {
        body,
        json_header_len: Some(json_len),
    }
}

#[derive(serde::Serialize)]
struct RequestJson<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    #[serde(skip_serializing_if = "Parameters::is_empty")]
    parameters: &'a Parameters,
    inputs: Vec<JsonOutput<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    outputs: Vec<RequestedJson<'a>>,
}

/// One entry of a request's `outputs`.
struct RequestedJson<'a> {
    name: &'a str,
    binary: bool,
}

impl Serialize for RequestedJson<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        struct Binary(bool);
        impl Serialize for Binary {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let mut map = serializer.serialize_map(Some(1))?;
                map.serialize_entry("binary_data", &self.0)?;
                map.end()
            }
        }
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry("name", self.name)?;
        map.serialize_entry("parameters", &Binary(self.binary))?;
        map.end()
    }
}

/// An answer body, read.
#[derive(Clone, Debug, PartialEq)]
pub enum ServerAnswer {
    /// 200: every output, as answered (a batching model's with their batch dimension).
    Success {
        model_name: String,
        model_version: String,
        id: Option<String>,
        outputs: Vec<Tensor>,
    },
    /// 207: one outcome per item, in order; a successful item's outputs without the
    /// leading dimension of 1 the body shows them with.
    MultiStatus {
        model_name: String,
        model_version: String,
        results: Vec<ItemOutcome>,
    },
    /// Any other status: the body's `error`, or the body itself when it has none.
    Error { message: String },
}

/// Longest stretch of a non-V2 error body quoted as the error.
const QUOTED_BODY_BYTES: usize = 1024;

/// Reads an answer with HTTP `status` and `body`; `json_header_len` is its
/// `Inference-Header-Content-Length` header, if it has one.
pub fn decode_answer(status: u16, body: &[u8], json_header_len: Option<usize>) -> Result<ServerAnswer, ProtocolError> {
    match status {
        200 => decode_success(body, json_header_len),
        207 => decode_multi_status(body),
        _ => Ok(ServerAnswer::Error {
            message: error_message(body),
        }),
    }
}

#[derive(serde::Deserialize)]
struct SuccessJson<'a> {
    model_name: String,
    #[serde(default)]
    model_version: Option<String>,
    #[serde(default)]
    id: Option<String>,
    #[serde(borrow)]
    outputs: Vec<OutputJson<'a>>,
}

#[derive(serde::Deserialize)]
struct OutputJson<'a> {
    name: String,
    datatype: String,
    shape: Vec<u64>,
    #[serde(default)]
    parameters: Option<OutputParametersJson>,
    #[serde(borrow, default)]
    data: Option<&'a RawValue>,
}

#[derive(serde::Deserialize)]
struct OutputParametersJson {
    #[serde(default)]
    binary_data_size: Option<u64>,
}

#[derive(serde::Deserialize)]
struct MultiStatusJson<'a> {
    model_name: String,
    #[serde(default)]
    model_version: Option<String>,
    #[serde(borrow)]
    results: Vec<ItemJson<'a>>,
}

#[derive(serde::Deserialize)]
struct ItemJson<'a> {
    status: u16,
    #[serde(borrow, default)]
    outputs: Option<Vec<OutputJson<'a>>>,
    #[serde(default)]
    error: Option<String>,
}

fn json_error(error: &serde_json::Error) -> ProtocolError {
    ProtocolError::json(error)
}

fn decode_success(body: &[u8], json_header_len: Option<usize>) -> Result<ServerAnswer, ProtocolError> {
    let (json, mut binary) = match json_header_len {
        None => (body, &[][..]),
        Some(n) => body.split_at_checked(n).ok_or(ProtocolError::HeaderLengthExceedsBody {
            header_len: n,
            body_len: body.len(),
        })?,
    };
    let json = std::str::from_utf8(json).map_err(|e| ProtocolError::InvalidUtf8 {
        offset: e.valid_up_to(),
    })?;
    let answer: SuccessJson<'_> = serde_json::from_str(json).map_err(|e| json_error(&e))?;
    let declared: u128 = answer
        .outputs
        .iter()
        .filter_map(|o| o.parameters.as_ref()?.binary_data_size)
        .map(u128::from)
        .sum();
    if declared != binary.len() as u128 {
        return Err(ProtocolError::BinaryTotal {
            declared,
            actual: binary.len(),
        });
    }
    let mut outputs = Vec::with_capacity(answer.outputs.len());
    for output in answer.outputs {
        outputs.push(output_tensor(output, &mut binary, false)?);
    }
    Ok(ServerAnswer::Success {
        model_name: answer.model_name,
        model_version: answer.model_version.unwrap_or_default(),
        id: answer.id,
        outputs,
    })
}

fn decode_multi_status(body: &[u8]) -> Result<ServerAnswer, ProtocolError> {
    let json = std::str::from_utf8(body).map_err(|e| ProtocolError::InvalidUtf8 {
        offset: e.valid_up_to(),
    })?;
    let answer: MultiStatusJson<'_> = serde_json::from_str(json).map_err(|e| json_error(&e))?;
    let mut results = Vec::with_capacity(answer.results.len());
    for item in answer.results {
        if item.status == 200 {
            let mut outputs = Vec::new();
            for output in item.outputs.unwrap_or_default() {
                outputs.push(output_tensor(output, &mut &[][..], true)?);
            }
            results.push(Ok(outputs));
        } else {
            results.push(Err(ItemError::new(item.status, item.error.unwrap_or_default())));
        }
    }
    Ok(ServerAnswer::MultiStatus {
        model_name: answer.model_name,
        model_version: answer.model_version.unwrap_or_default(),
        results,
    })
}

/// One output as a validated tensor: from its `data`, or from the front of `binary`
/// (which it then leaves). `strip_leading_one`: a 207 item's output, whose shape the body
/// shows with a leading 1.
fn output_tensor(output: OutputJson<'_>, binary: &mut &[u8], strip_leading_one: bool) -> Result<Tensor, ProtocolError> {
    let datatype = DataType::parse(&output.datatype).ok_or_else(|| ProtocolError::UnknownDatatype {
        name: output.name.clone(),
        found: super::error::render_str(&output.datatype),
    })?;
    let mut shape = output.shape;
    if strip_leading_one && shape.first() == Some(&1) {
        shape.remove(0);
    }
    let binary_size = output.parameters.and_then(|p| p.binary_data_size);
    let data = match (binary_size, output.data) {
        (Some(size), _) => {
            let size = usize::try_from(size).unwrap_or(usize::MAX);
            let (chunk, rest) = binary.split_at_checked(size).ok_or(ProtocolError::BinaryTotal {
                declared: size as u128,
                actual: binary.len(),
            })?;
            *binary = rest;
            if datatype == DataType::Bytes {
                bytes_element_offsets(chunk).map_err(|reason| ProtocolError::MalformedBytes {
                    name: output.name.clone(),
                    reason,
                })?;
            }
            chunk.to_vec()
        }
        (None, Some(raw)) => {
            let mut state = DataState::for_answer(datatype);
            let mut de = serde_json::Deserializer::from_str(raw.get());
            DataSeed(&mut state).deserialize(&mut de).map_err(|e| json_error(&e))?;
            state.finish(&output.name)?.0
        }
        (None, None) => {
            return Err(ProtocolError::MissingField {
                at: format!("output '{}'", output.name),
                field: "\"data\" (or parameters.binary_data_size)",
            })
        }
    };
    let tensor = Tensor {
        name: output.name,
        datatype,
        shape,
        data,
    };
    tensor.validate()?;
    Ok(tensor)
}

/// The message of an error body: its `error` if it is a V2 error, else the body's text
/// (cut to [`QUOTED_BODY_BYTES`]).
fn error_message(body: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct ErrorJson {
        error: String,
    }
    if let Ok(error) = serde_json::from_slice::<ErrorJson>(body) {
        return error.error;
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.len() <= QUOTED_BODY_BYTES {
        return text.to_owned();
    }
    let mut end = QUOTED_BODY_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{decode_request, encode_multi_status, encode_response, OutputOptions};

    fn tensor(name: &str, datatype: DataType, shape: &[u64], data: Vec<u8>) -> Tensor {
        Tensor {
            name: name.into(),
            datatype,
            shape: shape.to_vec(),
            data,
        }
    }

    fn f32s(values: &[f32]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    #[test]
    fn requests_round_trip_as_json_and_as_binary() {
        let body = br#"{"id":"a","parameters":{"timeout":5,"binary_data_output":true},
            "inputs":[{"name":"x","datatype":"FP32","shape":[2,2],"data":[0.1,2,3e-5,-4]},
                      {"name":"s","datatype":"BYTES","shape":[2],"data":["h\u00e9","" ]}],
            "outputs":[{"name":"y"}]}"#;
        let request = decode_request(body, None).unwrap();
        for binary in [false, true] {
            let form = BodyForm {
                binary_inputs: binary,
                binary_outputs: binary,
            };
            let encoded = encode_request(&request, form);
            let back = decode_request(&encoded.body, encoded.json_header_len).unwrap();
            assert_eq!(back.inputs, request.inputs, "binary: {binary}");
            assert_eq!(back.id.as_deref(), Some("a"));
            assert_eq!(back.timeout_us().unwrap(), Some(5));
            assert_eq!(back.binary_output("y"), binary);
            assert_eq!(back.binary_output_default(), binary);
            assert_eq!(encoded.json_header_len.is_some(), binary);
        }
    }

    #[test]
    fn answers_decode_from_what_the_server_encodes() {
        let outputs = vec![
            tensor("y", DataType::Fp32, &[2, 1], f32s(&[0.1, f32::NAN])),
            tensor(
                "label",
                DataType::Int64,
                &[2],
                [7i64, -1].iter().flat_map(|v| v.to_le_bytes()).collect(),
            ),
        ];
        for binary in [false, true] {
            let options = OutputOptions {
                requested: Vec::new(),
                binary_by_default: binary,
            };
            let encoded = encode_response("m", "3", Some("id-1"), &outputs, &options);
            let answer = decode_answer(200, &encoded.body, encoded.json_header_len).unwrap();
            let ServerAnswer::Success {
                model_name,
                model_version,
                id,
                outputs: decoded,
            } = answer
            else {
                panic!("not a success: {answer:?}");
            };
            assert_eq!((model_name.as_str(), model_version.as_str()), ("m", "3"));
            assert_eq!(id.as_deref(), Some("id-1"));
            assert_eq!(decoded[1], outputs[1]);
            let y: Vec<f32> = decoded[0]
                .data
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            assert_eq!(y[0], 0.1);
            assert!(y[1].is_nan(), "binary: {binary}: {y:?}");
        }
        let results: Vec<ItemOutcome> = vec![
            Ok(vec![tensor("y", DataType::Fp32, &[1], f32s(&[2.0]))]),
            Err(ItemError::new(422, "rejected")),
        ];
        let body = encode_multi_status("m", "3", None, &results);
        let ServerAnswer::MultiStatus { results: decoded, .. } = decode_answer(207, &body, None).unwrap() else {
            panic!("not a multi-status");
        };
        assert_eq!(decoded, results);
        assert_eq!(
            decode_answer(400, br#"{"error":"bad pixel"}"#, None).unwrap(),
            ServerAnswer::Error {
                message: "bad pixel".into()
            }
        );
        assert_eq!(
            decode_answer(502, b"<html>bad gateway</html>", None).unwrap(),
            ServerAnswer::Error {
                message: "<html>bad gateway</html>".into()
            }
        );
        assert!(decode_answer(
            200,
            br#"{"model_name":"m","outputs":[{"name":"y","datatype":"FP32","shape":[2],"data":[1]}]}"#,
            None
        )
        .is_err());
    }
}
