//! V2 response bodies: [`encode_response`] (200, JSON or JSON + binary tensor data),
//! [`encode_multi_status`] (207, per-item results) and [`encode_error`] (`{"error": ...}`).
//!
//! [`OutputOptions`] carries what the request asked for: which outputs (if it listed any,
//! only those, in its order) and which of them as binary data.
//!
//! A 207 body is always plain JSON, never binary data: each item's outputs are written
//! inline, so a client reads every item's outcome from one JSON document.

use serde::ser::{Serialize, SerializeMap, Serializer};

use super::parameters::Parameters;
use super::request::InferRequest;
use super::tensor_json::JsonOutput;
use crate::model::outcome::ItemOutcome;
use crate::model::tensor::Tensor;

/// Which outputs a response carries, and how.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OutputOptions {
    /// Requested outputs in order, each with whether it goes as binary data. Empty: every
    /// output the model produced, in its order, binary as `binary_by_default` says.
    pub requested: Vec<(String, bool)>,
    /// Binary-ness of outputs not listed in `requested` (request `binary_data_output`).
    pub binary_by_default: bool,
}

impl OutputOptions {
    /// The choices a decoded request made (per-output `binary_data` overrides the request's
    /// `binary_data_output`).
    pub fn from_request(request: &InferRequest) -> OutputOptions {
        let binary_by_default = request.binary_output_default();
        OutputOptions {
            requested: request
                .outputs
                .iter()
                .map(|o| (o.name.clone(), o.binary_data.unwrap_or(binary_by_default)))
                .collect(),
            binary_by_default,
        }
    }

    /// The outputs to send, in order, each with whether it goes as binary data. Requested
    /// outputs the model did not produce are left out (see [`OutputOptions::missing`]).
    pub fn select<'a>(&self, outputs: &'a [Tensor]) -> Vec<(&'a Tensor, bool)> {
        if self.requested.is_empty() {
            return outputs.iter().map(|t| (t, self.binary_by_default)).collect();
        }
        self.requested
            .iter()
            .filter_map(|(name, binary)| outputs.iter().find(|t| &t.name == name).map(|t| (t, *binary)))
            .collect()
    }

    /// Keeps only the requested outputs, in requested order (for building
    /// successful item of a 207, which has no per-call options).
    pub fn filter(&self, outputs: Vec<Tensor>) -> Vec<Tensor> {
        if self.requested.is_empty() {
            return outputs;
        }
        let mut slots: Vec<Option<Tensor>> = outputs.into_iter().map(Some).collect();
        self.requested
            .iter()
            .filter_map(|(name, _)| {
                slots
                    .iter_mut()
                    .find(|s| s.as_ref().is_some_and(|t| &t.name == name))
                    .and_then(Option::take)
            })
            .collect()
    }

    /// The first requested output that `outputs` does not contain, if any.
    pub fn missing(&self, outputs: &[Tensor]) -> Option<&str> {
        self.requested
            .iter()
            .map(|(name, _)| name.as_str())
            .find(|name| !outputs.iter().any(|t| t.name == *name))
    }
}

/// An encoded response body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncodedResponse {
    pub body: Vec<u8>,
    /// Length of the JSON part when binary data follows it: send it as the
    /// `Inference-Header-Content-Length` header. `None`: the whole body is JSON.
    pub json_header_len: Option<usize>,
}

/// What an answer body says besides its outputs or error: the model, the request's id,
/// and, for answers that carry them, `parameters` and a `status`.
///
/// REST answers have no `parameters` and give their status in the status line; batch
/// answer lines (`tensorplug infer`) carry both in the body, since a line has nowhere else
/// to put them.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct AnswerHead<'a> {
    pub model_name: &'a str,
    pub model_version: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<&'a str>,
    /// Written when not empty.
    #[serde(skip_serializing_if = "is_empty")]
    pub parameters: &'a Parameters,
    /// Written when given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
}

fn is_empty(parameters: &&Parameters) -> bool {
    parameters.is_empty()
}

/// No parameters.
static NO_PARAMETERS: Parameters = Parameters(Vec::new());

impl<'a> AnswerHead<'a> {
    /// A head with no parameters and no status, as REST answers have.
    pub fn plain(model_name: &'a str, model_version: &'a str, id: Option<&'a str>) -> Self {
        AnswerHead {
            model_name,
            model_version,
            id,
            parameters: &NO_PARAMETERS,
            status: None,
        }
    }
}

#[derive(serde::Serialize)]
struct ResponseJson<'a> {
    #[serde(flatten)]
    head: &'a AnswerHead<'a>,
    outputs: Vec<JsonOutput<'a>>,
}

/// Encodes a successful inference response with the outputs `options` selects.
///
/// Binary outputs carry `parameters.binary_data_size` and their bytes follow the JSON in
/// output order; then `json_header_len` is the JSON's length. JSON outputs are flat;
/// BYTES elements that are not UTF-8 are written lossily (U+FFFD) — clients that need
/// them exactly must request binary output.
pub fn encode_response(
    model_name: &str,
    model_version: &str,
    id: Option<&str>,
    outputs: &[Tensor],
    options: &OutputOptions,
) -> EncodedResponse {
    encode_response_with(&AnswerHead::plain(model_name, model_version, id), outputs, options)
}

/// [`encode_response`] with the head's `parameters` and `status` written too.
pub fn encode_response_with(head: &AnswerHead<'_>, outputs: &[Tensor], options: &OutputOptions) -> EncodedResponse {
    let selected = options.select(outputs);
    let json = ResponseJson {
        head,
        outputs: selected
            .iter()
            .map(|&(tensor, binary)| JsonOutput {
                tensor,
                binary,
                leading_one: false,
            })
            .collect(),
    };
    let mut body = to_json(&json);
    let binary: Vec<&Tensor> = selected.iter().filter(|(_, b)| *b).map(|(t, _)| *t).collect();
    if binary.is_empty() {
        return EncodedResponse {
            body,
            json_header_len: None,
        };
    }
    let json_len = body.len();
    body.reserve(binary.iter().map(|t| t.data.len()).sum());
    for tensor in binary {
        body.extend_from_slice(&tensor.data);
    }
    EncodedResponse {
        body,
        json_header_len: Some(json_len),
    }
}

#[derive(serde::Serialize)]
struct MultiStatusJson<'a> {
    #[serde(flatten)]
    head: &'a AnswerHead<'a>,
    /// A summary for V2 clients that look for an `error` key in any answer that is not a
    /// plain success (tritonclient does); the per-item outcomes are in `results`.
    error: String,
    results: Vec<ItemJson<'a>>,
}

struct ItemJson<'a>(&'a ItemOutcome);

impl Serialize for ItemJson<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(2))?;
        match self.0 {
            Ok(outputs) => {
                map.serialize_entry("status", &200u16)?;
                let outputs: Vec<JsonOutput<'_>> = outputs
                    .iter()
                    .map(|tensor| JsonOutput {
                        tensor,
                        binary: false,
                        leading_one: true,
                    })
                    .collect();
                map.serialize_entry("outputs", &outputs)?;
            }
            Err(error) => {
                map.serialize_entry("status", &error.status)?;
                map.serialize_entry("error", &error.message)?;
            }
        }
        map.end()
    }
}

/// Encodes a 207 Multi-Status body: one entry per item, in order, each successful item's
/// outputs (without a batch dimension) shown with a leading dimension of 1. Always JSON (no
/// binary data); successful items list all their outputs (apply [`OutputOptions::filter`]
/// first to honour the request's output selection).
pub fn encode_multi_status(
    model_name: &str,
    model_version: &str,
    id: Option<&str>,
    results: &[ItemOutcome],
) -> Vec<u8> {
    encode_multi_status_with(&AnswerHead::plain(model_name, model_version, id), results)
}

/// [`encode_multi_status`] with the head's `parameters` and `status` written too.
pub fn encode_multi_status_with(head: &AnswerHead<'_>, results: &[ItemOutcome]) -> Vec<u8> {
    let failed = results.iter().filter(|r| r.is_err()).count();
    to_json(&MultiStatusJson {
        head,
        error: format!(
            "{failed} of {} items failed; each item's status is in \"results\"",
            results.len()
        ),
        results: results.iter().map(ItemJson).collect(),
    })
}

/// Encodes a V2 error body: `{"error": "<message>"}`.
pub fn encode_error(message: &str) -> Vec<u8> {
    #[derive(serde::Serialize)]
    struct ErrorJson<'a> {
        error: &'a str,
    }
    to_json(&ErrorJson { error: message })
}

/// A failure with its head: `{"model_name", "model_version", "id", "parameters",
/// "status", "error"}` (a batch answer line for a failed request).
pub fn encode_error_with(head: &AnswerHead<'_>, message: &str) -> Vec<u8> {
    #[derive(serde::Serialize)]
    struct ErrorJson<'a> {
        #[serde(flatten)]
        head: &'a AnswerHead<'a>,
        error: &'a str,
    }
    to_json(&ErrorJson { head, error: message })
}

/// Serializes a body. Our `Serialize` impls cannot fail (string keys, no custom errors),
/// but should that ever change the client still gets a well-formed V2 error.
pub(crate) fn to_json<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value)
        .unwrap_or_else(|_| br#"{"error":"internal error: response could not be encoded"}"#.to_vec())
}

#[cfg(test)]
#[path = "response_tests.rs"]
mod tests;
