//! The types a line is on its way through the job: the parsed [`Line`] (with what makes
//! it mergeable, its [`MergeKey`]), its [`LineOutcome`] once a worker has it, the
//! [`Resolved`] line (outcome and the request that brought it), and the encoded
//! [`AnswerLine`] the writer writes. A leaf: every stage names these, they name no stage.

use tokio::sync::OwnedSemaphorePermit;

use crate::model::outcome::ItemOutcome;
use crate::model::tensor::{DataType, Tensor};
use crate::protocol::{InferRequest, Parameters, RequestedOutput};

/// What makes lines mergeable: equal keys.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct MergeKey {
    /// Each input's name, datatype and per-item shape, in request order.
    inputs: Vec<(String, DataType, Vec<u64>)>,
    outputs: Vec<RequestedOutput>,
    parameters: Parameters,
}

/// One parsed input line, on its way to a worker.
pub(crate) struct Line {
    /// Its place among the lines to answer (the reorder window's order).
    pub seq: u64,
    /// Its line number − 1: the answer's `batch_index`.
    pub index: u64,
    pub request: InferRequest,
    /// `None`: the line goes alone.
    pub key: Option<MergeKey>,
    /// Items the line holds (its first dimension); 0 when it goes alone.
    pub items: u64,
    /// Its place in the reorder window, given back once its answer is written.
    pub permit: OwnedSemaphorePermit,
}

impl Line {
    pub(crate) fn new(seq: u64, index: u64, request: InferRequest, permit: OwnedSemaphorePermit) -> Line {
        let (key, items) = match merge_key(&request) {
            Some((key, items)) => (Some(key), items),
            None => (None, 0),
        };
        Line {
            seq,
            index,
            request,
            key,
            items,
            permit,
        }
    }
}

/// The line's key and item count, or `None` when it cannot be merged.
fn merge_key(request: &InferRequest) -> Option<(MergeKey, u64)> {
    let mut items = None;
    let mut inputs = Vec::with_capacity(request.inputs.len());
    for tensor in &request.inputs {
        let (&n, per_item) = tensor.shape.split_first()?;
        if n == 0 || items.is_some_and(|m| m != n) {
            return None;
        }
        items = Some(n);
        inputs.push((tensor.name.clone(), tensor.datatype, per_item.to_vec()));
    }
    let key = MergeKey {
        inputs,
        outputs: request.outputs.clone(),
        parameters: request.parameters.clone(),
    };
    Some((key, items?))
}

/// What one line's answer is.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum LineOutcome {
    /// Every item succeeded: the outputs, as the server would have answered the line alone.
    Success {
        model_name: String,
        model_version: String,
        outputs: Vec<Tensor>,
    },
    /// Some items of a multi-item line failed: every item's outcome (a 207 of its own).
    /// Over gRPC the successful items' outputs are not known (empty).
    Items {
        model_name: String,
        model_version: String,
        results: Vec<ItemOutcome>,
    },
    /// The line failed as a whole (a single-item line's failed item, or a failed request).
    Failure { status: u16, message: String },
}

impl LineOutcome {
    /// Whether retrying could change it: it failed, and only with 503s and 504s.
    pub(crate) fn retryable(&self) -> bool {
        let transient = |status: u16| status == 503 || status == 504;
        match self {
            LineOutcome::Success { .. } => false,
            LineOutcome::Failure { status, .. } => transient(*status),
            LineOutcome::Items { results, .. } => {
                let mut errors = results.iter().filter_map(|r| r.as_ref().err()).peekable();
                errors.peek().is_some() && errors.all(|e| transient(e.status))
            }
        }
    }
}

/// A line with its final outcome.
pub(crate) struct Resolved {
    pub line: Line,
    pub outcome: LineOutcome,
    /// Requests sent with this line.
    pub attempts: u32,
    /// Retried at least once.
    pub retried: bool,
    /// The id of the request that brought the outcome.
    pub inference_id: String,
}

/// One line's answer, encoded, on its way to the writer.
pub(crate) struct AnswerLine {
    pub seq: u64,
    /// The answer line, without its newline.
    pub body: Vec<u8>,
    pub ok: bool,
    /// Given back once the line is written.
    pub permit: OwnedSemaphorePermit,
}

/// Requests for the job's unit tests.
#[cfg(test)]
pub(crate) mod test_requests {
    use crate::protocol::{decode_request, InferRequest};

    pub(crate) fn request(json: &str) -> InferRequest {
        decode_request(json.as_bytes(), None).unwrap()
    }

    /// One FP32 input `x` of `shape`.
    pub(crate) fn x(values: &[f32], shape: &[u64]) -> InferRequest {
        let data: Vec<String> = values.iter().map(f32::to_string).collect();
        request(&format!(
            r#"{{"inputs":[{{"name":"x","datatype":"FP32","shape":{shape:?},"data":[{}]}}]}}"#,
            data.join(",")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::test_requests::{request, x};
    use super::*;

    #[test]
    fn keys_compare_inputs_per_item_shapes_outputs_and_parameters() {
        let key = |r: &InferRequest| merge_key(r);
        let (a, n) = key(&x(&[1.0, 2.0], &[2, 1])).unwrap();
        assert_eq!(n, 2);
        assert_eq!(key(&x(&[3.0], &[1, 1])).unwrap().0, a);
        assert_ne!(key(&x(&[3.0, 4.0], &[1, 2])).unwrap().0, a, "per-item shape differs");
        assert!(key(&x(&[], &[0, 1])).is_none(), "no items");
        assert!(key(&x(&[1.0], &[1])).is_some());
        assert!(key(&x(&[1.0], &[])).is_none(), "nothing to stack along");
        let with_output =
            request(r#"{"inputs":[{"name":"x","datatype":"FP32","shape":[1,1],"data":[1]}],"outputs":[{"name":"y"}]}"#);
        assert_ne!(key(&with_output).unwrap().0, a);
        let with_parameter = request(
            r#"{"parameters":{"timeout":9},"inputs":[{"name":"x","datatype":"FP32","shape":[1,1],"data":[1]}]}"#,
        );
        assert_ne!(key(&with_parameter).unwrap().0, a);
    }
}
