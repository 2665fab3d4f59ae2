//! Micro-batching: up to K compatible lines merged into one multi-item request, and the
//! answer split back into one answer per line.
//!
//! Lines are compatible when they have the same inputs (names, order, datatypes and
//! per-item shapes, i.e. the shape after the first dimension), the same requested
//! outputs and the same request parameters; each line's first dimension (the same for
//! all its inputs, at least 1) is its item count. Merging stacks the lines' inputs along
//! that dimension. A line with no first dimension to stack along goes alone.
//!
//! Only over a wire (REST, gRPC), where one request instead of K saves K − 1 round trips;
//! in-process, the serving batcher stacks the lines' own requests.

use super::line::LineOutcome;
use super::transport::Reply;
use crate::model::outcome::{ItemError, ItemOutcome};
use crate::model::tensor::{bytes_element_offsets, element_count, Item, Tensor};
use crate::protocol::{InferRequest, Parameters};

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

/// Splits `reply` among lines of `counts` items each (in request order): each line's
/// outcome, or `None` for a line whose items succeeded but whose outputs the reply did
/// not carry (a partly failed gRPC request), which has to be sent again. `None` as a
/// whole when the answer does not fit the lines (an output whose first dimension is not
/// the total item count, a different number of item results): then the lines have to go
/// alone.
///
/// A single line takes a successful answer as it is (the model need not batch).
pub(crate) fn split(reply: Reply, counts: &[u64]) -> Option<Vec<Option<LineOutcome>>> {
    let total: u64 = counts.iter().sum();
    match reply {
        Reply::Success {
            model_name,
            model_version,
            outputs,
        } => {
            if counts.len() == 1 {
                return Some(vec![Some(LineOutcome::Success {
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
                        Some(LineOutcome::Success {
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
                    Some(line_items(&model_name, &model_version, mine))
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
                        return None;
                    }
                    let outcomes = mine.into_iter().map(|r| r.map(|()| Vec::new())).collect();
                    Some(line_items("", "", outcomes))
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
    use super::*;
    use crate::batch::line::test_requests::x;
    use crate::model::tensor::{push_bytes_element, DataType};

    fn f32s(t: &Tensor) -> Vec<f32> {
        t.data
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
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
        let Some(LineOutcome::Success { outputs, .. }) = &shares[1] else {
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
        assert!(matches!(&shares[0], Some(LineOutcome::Success { outputs, .. }) if outputs[0].shape == [1, 1]));
        assert!(matches!(&shares[1], Some(LineOutcome::Failure { status: 422, message }) if message == "rejected"));
        let Some(LineOutcome::Success { outputs, .. }) = &shares[2] else {
            panic!("{shares:?}");
        };
        assert_eq!(
            (outputs[0].shape.as_slice(), f32s(&outputs[0])),
            (&[2, 1][..], vec![3.0, 4.0])
        );
        let Some(busy) = &shares[3] else { panic!() };
        assert!(busy.retryable());
        let Some(rejected) = &shares[1] else { panic!() };
        assert!(!rejected.retryable());

        let statuses = Reply::Statuses {
            results: vec![Ok(()), Err(ItemError::new(400, "bad")), Ok(()), Ok(())],
        };
        let shares = split(statuses, &[1, 1, 2]).unwrap();
        assert_eq!(shares[0], None);
        assert!(matches!(&shares[1], Some(LineOutcome::Failure { status: 400, .. })));
        assert_eq!(shares[2], None);
        assert!(split(Reply::Statuses { results: vec![Ok(())] }, &[1, 1]).is_none());
    }
}
