//! Micro-batching: up to K compatible lines merged into one multi-item request, and the
//! answer split back into one answer per line.
//!
//! Lines are compatible when they have the same inputs (names, order, datatypes and
//! per-item shapes, i.e. the shape after the first dimension), the same requested
//! outputs and the same request parameters; each line's first dimension (the same for
//! all its inputs, at least 1) is its item count. Merging stacks the lines' inputs along
//! that dimension. A line with no first dimension to stack along goes alone.
//!
//! [`Batcher`] groups lines the way the server's batcher groups items: whenever a worker
//! is free it takes what has been read (up to K compatible lines), so a lone line is
//! never held back and groups grow by themselves while the workers are busy.

use std::collections::VecDeque;

use tokio::sync::{mpsc, OwnedSemaphorePermit};

use super::transport::Reply;
use crate::model::outcome::{ItemError, ItemOutcome};
use crate::model::tensor::{bytes_element_offsets, element_count, DataType, Item, Tensor};
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

/// Hands workers groups of up to `batch_size` compatible lines.
pub(crate) struct Batcher {
    lines: mpsc::Receiver<Line>,
    /// Lines read but not yet taken (they did not fit the group being formed), in order.
    held: VecDeque<Line>,
    batch_size: usize,
}

impl Batcher {
    pub(crate) fn new(lines: mpsc::Receiver<Line>, batch_size: usize) -> Self {
        Batcher {
            lines,
            held: VecDeque::new(),
            batch_size,
        }
    }

    /// The next group: the oldest line waiting, and as many lines compatible with it as
    /// are waiting (up to the batch size). `None` once every line has been taken.
    pub(crate) async fn next_group(&mut self) -> Option<Vec<Line>> {
        let first = match self.held.pop_front() {
            Some(line) => line,
            None => self.lines.recv().await?,
        };
        let mut group = vec![first];
        let Some(key) = group[0].key.clone() else {
            return Some(group);
        };
        let mut index = 0;
        while group.len() < self.batch_size && index < self.held.len() {
            if self.held[index].key.as_ref() == Some(&key) {
                if let Some(line) = self.held.remove(index) {
                    group.push(line);
                }
            } else {
                index += 1;
            }
        }
        while group.len() < self.batch_size {
            let Ok(line) = self.lines.try_recv() else {
                break;
            };
            if line.key.as_ref() == Some(&key) {
                group.push(line);
            } else {
                // Bounded: every held line holds a window permit.
                self.held.push_back(line);
            }
        }
        Some(group)
    }
}

/// The lines' requests merged into one, with id `id`: their inputs stacked along the
/// first dimension, the first line's outputs and parameters (all lines share them). A
/// single line's request is sent as it is, with the id.
pub(crate) fn merge(requests: &[&InferRequest], id: &str) -> InferRequest {
    let Some(first) = requests.first() else {
        return InferRequest {
            id: Some(id.to_owned()),
            inputs: Vec::new(),
            outputs: Vec::new(),
            parameters: Parameters::default(),
        };
    };
    let inputs = if requests.len() == 1 {
        first.inputs.clone()
    } else {
        first
            .inputs
            .iter()
            .enumerate()
            .map(|(at, input)| {
                let parts = requests.iter().filter_map(|r| r.inputs.get(at));
                let rows: u64 = parts.clone().map(|t| t.shape.first().copied().unwrap_or(0)).sum();
                let mut shape = input.shape.clone();
                if let Some(first_dim) = shape.first_mut() {
                    *first_dim = rows;
                }
                let mut data = Vec::with_capacity(parts.clone().map(|t| t.data.len()).sum());
                for part in parts {
                    data.extend_from_slice(&part.data);
                }
                Tensor {
                    name: input.name.clone(),
                    datatype: input.datatype,
                    shape,
                    data,
                }
            })
            .collect()
    };
    InferRequest {
        id: Some(id.to_owned()),
        inputs,
        outputs: first.outputs.clone(),
        parameters: first.parameters.clone(),
    }
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

/// One line's share of an answer.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Share {
    Done(LineOutcome),
    /// Its items succeeded, but the answer did not carry their outputs (a partly failed
    /// gRPC request): it has to be sent again.
    NeedsOutputs,
}

/// Splits `reply` among lines of `counts` items each (in request order). `None` when the
/// answer does not fit the lines (an output whose first dimension is not the total item
/// count, a different number of item results): then the lines have to go alone.
///
/// A single line takes a successful answer as it is (the model need not batch).
pub(crate) fn split(reply: Reply, counts: &[u64]) -> Option<Vec<Share>> {
    let total: u64 = counts.iter().sum();
    match reply {
        Reply::Success {
            model_name,
            model_version,
            outputs,
        } => {
            if counts.len() == 1 {
                return Some(vec![Share::Done(LineOutcome::Success {
                    model_name,
                    model_version,
                    outputs,
                })]);
            }
            let mut per_line: Vec<Vec<Tensor>> = counts.iter().map(|_| Vec::with_capacity(outputs.len())).collect();
            for output in &outputs {
                for (line, part) in per_line.iter_mut().zip(split_rows(output, counts, total)?) {
                    line.push(part);
                }
            }
            Some(
                per_line
                    .into_iter()
                    .map(|outputs| {
                        Share::Done(LineOutcome::Success {
                            model_name: model_name.clone(),
                            model_version: model_version.clone(),
                            outputs,
                        })
                    })
                    .collect(),
            )
        }
        Reply::Items {
            model_name,
            model_version,
            results,
        } => {
            if results.len() as u64 != total {
                return None;
            }
            let mut results = results.into_iter();
            let shares = counts
                .iter()
                .map(|&n| {
                    let mine: Vec<ItemOutcome> = results.by_ref().take(n as usize).collect();
                    Share::Done(line_items(&model_name, &model_version, mine))
                })
                .collect();
            Some(shares)
        }
        Reply::Statuses { results } => {
            if results.len() as u64 != total {
                return None;
            }
            let mut results = results.into_iter();
            let shares = counts
                .iter()
                .map(|&n| {
                    let mine: Vec<Result<(), ItemError>> = results.by_ref().take(n as usize).collect();
                    if mine.iter().all(Result::is_ok) {
                        return Share::NeedsOutputs;
                    }
                    let outcomes = mine.into_iter().map(|r| r.map(|()| Vec::new())).collect();
                    Share::Done(line_items("", "", outcomes))
                })
                .collect();
            Some(shares)
        }
    }
}

/// A line's outcome from its items' outcomes, as the server assembles a request's answer:
/// all succeeded → their outputs stacked; one item that failed → its error; otherwise
/// every item's outcome.
fn line_items(model_name: &str, model_version: &str, mut outcomes: Vec<ItemOutcome>) -> LineOutcome {
    if outcomes.iter().all(Result::is_ok) {
        let items: Vec<Item> = outcomes.into_iter().filter_map(Result::ok).collect();
        return match stack_items(&items) {
            Ok(outputs) => LineOutcome::Success {
                model_name: model_name.to_owned(),
                model_version: model_version.to_owned(),
                outputs,
            },
            Err(message) => LineOutcome::Failure { status: 502, message },
        };
    }
    if outcomes.len() == 1 {
        if let Some(Err(error)) = outcomes.pop() {
            return LineOutcome::Failure {
                status: error.status,
                message: error.message,
            };
        }
    }
    LineOutcome::Items {
        model_name: model_name.to_owned(),
        model_version: model_version.to_owned(),
        results: outcomes,
    }
}

/// Every item's outputs stacked along a new first dimension, output by output, in the
/// first item's order.
fn stack_items(items: &[Item]) -> Result<Vec<Tensor>, String> {
    let Some(first) = items.first() else {
        return Ok(Vec::new());
    };
    first
        .iter()
        .map(|output| {
            let parts: Option<Vec<&Tensor>> = items
                .iter()
                .map(|item| item.iter().find(|t| t.name == output.name))
                .collect();
            let parts = parts.ok_or_else(|| format!("output '{}' is missing from some items", output.name))?;
            Tensor::stack(parts.into_iter()).map_err(|e| format!("the items' outputs cannot be stacked: {e}"))
        })
        .collect()
}

/// `tensor`'s rows (first dimension, `total` of them) cut into consecutive parts of
/// `counts` rows each. `None` if its first dimension is not `total`.
fn split_rows(tensor: &Tensor, counts: &[u64], total: u64) -> Option<Vec<Tensor>> {
    let (&rows, rest) = tensor.shape.split_first()?;
    if rows != total {
        return None;
    }
    let per_row = usize::try_from(element_count(rest)?).ok()?;
    let piece = |n: u64, data: &[u8]| {
        let mut shape = tensor.shape.clone();
        shape[0] = n;
        Tensor {
            name: tensor.name.clone(),
            datatype: tensor.datatype,
            shape,
            data: data.to_vec(),
        }
    };
    let mut parts = Vec::with_capacity(counts.len());
    let mut row = 0usize;
    match tensor.datatype.element_size() {
        Some(size) => {
            let row_bytes = per_row * size;
            if tensor.data.len() != row_bytes * usize::try_from(total).ok()? {
                return None;
            }
            for &n in counts {
                let end = row + usize::try_from(n).ok()?;
                parts.push(piece(n, tensor.data.get(row * row_bytes..end * row_bytes)?));
                row = end;
            }
        }
        None => {
            let offsets = bytes_element_offsets(&tensor.data).ok()?;
            for &n in counts {
                let end = row + usize::try_from(n).ok()?;
                let (start, stop) = (*offsets.get(row * per_row)?, *offsets.get(end * per_row)?);
                parts.push(piece(n, tensor.data.get(start..stop)?));
                row = end;
            }
        }
    }
    Some(parts)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::model::tensor::push_bytes_element;
    use crate::protocol::decode_request;

    fn request(json: &str) -> InferRequest {
        decode_request(json.as_bytes(), None).unwrap()
    }

    fn x(values: &[f32], shape: &[u64]) -> InferRequest {
        let data: Vec<String> = values.iter().map(f32::to_string).collect();
        request(&format!(
            r#"{{"inputs":[{{"name":"x","datatype":"FP32","shape":{shape:?},"data":[{}]}}]}}"#,
            data.join(",")
        ))
    }

    fn f32s(t: &Tensor) -> Vec<f32> {
        t.data
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

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

    #[test]
    fn merged_requests_stack_and_answers_split_back() {
        let (a, b) = (x(&[1.0, 2.0], &[2, 1]), x(&[3.0], &[1, 1]));
        let merged = merge(&[&a, &b], "id-9");
        assert_eq!(merged.id.as_deref(), Some("id-9"));
        assert_eq!(merged.inputs[0].shape, vec![3, 1]);
        assert_eq!(f32s(&merged.inputs[0]), vec![1.0, 2.0, 3.0]);

        let y = Tensor {
            name: "y".into(),
            datatype: DataType::Fp32,
            shape: vec![3, 1],
            data: merged.inputs[0].data.clone(),
        };
        let reply = Reply::Success {
            model_name: "m".into(),
            model_version: "1".into(),
            outputs: vec![y.clone()],
        };
        let shares = split(reply, &[2, 1]).unwrap();
        let Share::Done(LineOutcome::Success { outputs, .. }) = &shares[1] else {
            panic!("{shares:?}");
        };
        assert_eq!(outputs[0].shape, vec![1, 1]);
        assert_eq!(f32s(&outputs[0]), vec![3.0]);
        // An output that is not per item cannot be split.
        let odd = Reply::Success {
            model_name: "m".into(),
            model_version: "1".into(),
            outputs: vec![Tensor { shape: vec![1, 3], ..y }],
        };
        assert!(split(odd, &[2, 1]).is_none());
    }

    #[test]
    fn bytes_outputs_split_by_their_elements() {
        let mut data = Vec::new();
        for s in ["a", "bb", "", "dddd"] {
            push_bytes_element(&mut data, s.as_bytes());
        }
        let t = Tensor {
            name: "s".into(),
            datatype: DataType::Bytes,
            shape: vec![2, 2],
            data,
        };
        let parts = split_rows(&t, &[1, 1], 2).unwrap();
        assert_eq!(parts[1].shape, vec![1, 2]);
        assert!(parts[1].validate().is_ok());
        assert_eq!(parts[1].data.len(), 4 + 4 + 4);
    }

    #[test]
    fn multi_status_answers_give_each_line_its_own_outcome() {
        let item = |v: f32| -> ItemOutcome {
            Ok(vec![Tensor {
                name: "y".into(),
                datatype: DataType::Fp32,
                shape: vec![1],
                data: v.to_le_bytes().to_vec(),
            }])
        };
        let reply = Reply::Items {
            model_name: "m".into(),
            model_version: "1".into(),
            results: vec![
                item(1.0),
                Err(ItemError::new(422, "rejected")),
                item(3.0),
                item(4.0),
                Err(ItemError::new(503, "busy")),
            ],
        };
        let shares = split(reply, &[1, 1, 2, 1]).unwrap();
        assert!(matches!(&shares[0], Share::Done(LineOutcome::Success { outputs, .. }) if outputs[0].shape == [1, 1]));
        assert!(
            matches!(&shares[1], Share::Done(LineOutcome::Failure { status: 422, message }) if message == "rejected")
        );
        let Share::Done(LineOutcome::Success { outputs, .. }) = &shares[2] else {
            panic!("{shares:?}");
        };
        assert_eq!(
            (outputs[0].shape.as_slice(), f32s(&outputs[0])),
            (&[2, 1][..], vec![3.0, 4.0])
        );
        let Share::Done(busy) = &shares[3] else { panic!() };
        assert!(busy.retryable());
        let Share::Done(rejected) = &shares[1] else { panic!() };
        assert!(!rejected.retryable());

        let statuses = Reply::Statuses {
            results: vec![Ok(()), Err(ItemError::new(400, "bad")), Ok(()), Ok(())],
        };
        let shares = split(statuses, &[1, 1, 2]).unwrap();
        assert_eq!(shares[0], Share::NeedsOutputs);
        assert!(matches!(
            &shares[1],
            Share::Done(LineOutcome::Failure { status: 400, .. })
        ));
        assert_eq!(shares[2], Share::NeedsOutputs);
        assert!(split(Reply::Statuses { results: vec![Ok(())] }, &[1, 1]).is_none());
    }

    #[tokio::test]
    async fn the_batcher_groups_compatible_lines_and_holds_the_others() {
        let permits = Arc::new(tokio::sync::Semaphore::new(16));
        let (tx, rx) = mpsc::channel(16);
        let wide = || x(&[1.0, 2.0], &[1, 2]);
        let narrow = || x(&[1.0], &[1, 1]);
        let requests = [narrow(), wide(), narrow(), narrow(), wide(), narrow()];
        for (seq, r) in requests.into_iter().enumerate() {
            let permit = permits.clone().acquire_owned().await.unwrap();
            tx.send(Line::new(seq as u64, seq as u64, r, permit)).await.unwrap();
        }
        drop(tx);
        let mut batcher = Batcher::new(rx, 3);
        let mut groups = Vec::new();
        while let Some(group) = batcher.next_group().await {
            groups.push(group.iter().map(|l| l.seq).collect::<Vec<_>>());
        }
        assert_eq!(groups, vec![vec![0, 2, 3], vec![1, 4], vec![5]]);
    }
}
