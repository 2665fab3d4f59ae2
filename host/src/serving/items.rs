//! From a request's tensors to items, and from items' outcomes back to one answer.
//!
//! Whatever edge a request came through: checks inputs against the model's declared
//! inputs, splits a batching model's request along its leading dimension, and decides
//! whether the request's answer is a plain success, one error, or a per-item
//! (multi-status) answer.

use crate::model::config::ModelConfig;
use crate::model::outcome::{ItemError, ItemOutcome};
use crate::model::tensor::{Item, Tensor};

/// Why a request does not fit its model (a client error).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("unknown input '{name}': model '{model}' takes {}", .inputs.join(", "))]
    UnknownInput {
        name: String,
        model: String,
        inputs: Vec<String>,
    },
    #[error("unknown output '{name}' requested: model '{model}' answers {}", .outputs.join(", "))]
    UnknownOutput {
        name: String,
        model: String,
        outputs: Vec<String>,
    },
    /// A datatype, shape or batch dimension the model does not take.
    #[error("{0}")]
    Mismatch(String),
}

/// Checks `inputs` against the model's declared inputs and splits them into items.
pub fn split_request(config: &ModelConfig, mut inputs: Vec<Tensor>) -> Result<Vec<Item>, RequestError> {
    let invalid = RequestError::Mismatch;
    for tensor in &inputs {
        let Some(spec) = config.inputs.iter().find(|s| s.name == tensor.name) else {
            return Err(RequestError::UnknownInput {
                name: tensor.name.clone(),
                model: config.name.clone(),
                inputs: config.inputs.iter().map(|s| s.name.clone()).collect(),
            });
        };
        if tensor.datatype != spec.datatype {
            return Err(invalid(format!(
                "input '{}': datatype {} does not match the model's {}",
                tensor.name, tensor.datatype, spec.datatype
            )));
        }
    }
    if let Some(missing) = config.inputs.iter().find(|s| !inputs.iter().any(|t| t.name == s.name)) {
        return Err(invalid(format!("missing input '{}'", missing.name)));
    }
    // Plugins see inputs in declared order, whatever order the client used.
    inputs.sort_by_key(|t| config.inputs.iter().position(|s| s.name == t.name));

    if !config.batches {
        for (tensor, spec) in inputs.iter().zip(&config.inputs) {
            if !spec.accepts_shape(&tensor.shape) {
                return Err(invalid(format!(
                    "input '{}': shape {:?} is not the model's {}",
                    tensor.name,
                    tensor.shape,
                    spec.describe_shapes()
                )));
            }
        }
        return Ok(vec![inputs]);
    }

    let mut batch_size = None;
    for (tensor, spec) in inputs.iter().zip(&config.inputs) {
        let Some((&n, per_item)) = tensor.shape.split_first() else {
            return Err(invalid(format!(
                "input '{}': shape [] has no batch dimension; model '{}' takes [N] + {}",
                tensor.name,
                config.name,
                spec.describe_shapes()
            )));
        };
        if !spec.accepts_shape(per_item) {
            return Err(invalid(format!(
                "input '{}': shape {:?} is not [N] + {}",
                tensor.name,
                tensor.shape,
                spec.describe_shapes()
            )));
        }
        match batch_size {
            None => batch_size = Some(n),
            Some(m) if m != n => {
                return Err(invalid(format!(
                    "input '{}': batch dimension {n} differs from the other inputs' {m}",
                    tensor.name
                )))
            }
            Some(_) => {}
        }
    }
    let n = batch_size.unwrap_or(0);
    if n == 0 {
        return Err(invalid(
            "the batch dimension is 0: a request needs at least one item".into(),
        ));
    }
    // Checked before splitting: empty per-item tensors make huge batch dimensions cheap
    // to send, and such a request could never be queued anyway.
    if n > config.batching.max_queue_size as u64 {
        return Err(invalid(format!(
            "the request has {n} items; model '{}' queues at most {} (batching.max_queue_size)",
            config.name, config.batching.max_queue_size
        )));
    }

    let mut items: Vec<Item> = (0..n).map(|_| Vec::with_capacity(inputs.len())).collect();
    for tensor in &inputs {
        let rows = tensor.split_leading().map_err(|e| invalid(e.to_string()))?;
        for (item, row) in items.iter_mut().zip(rows) {
            item.push(row);
        }
    }
    Ok(items)
}

/// What a request's answer is, given its items' outcomes.
#[derive(Debug)]
pub enum Answer {
    /// Every item succeeded: the outputs, stacked again for a batching model.
    Success(Vec<Tensor>),
    /// A single-item request failed: answer with this item's status.
    Failure(ItemError),
    /// Some items of a multi-item request failed: one status per item (HTTP 207).
    MultiStatus(Vec<ItemOutcome>),
}

/// Reassembles one request's answer from its items' outcomes, in order.
pub fn assemble(config: &ModelConfig, mut outcomes: Vec<ItemOutcome>) -> Answer {
    if outcomes.len() == 1 {
        return match outcomes.pop() {
            // A model without batching answers its one item as it is; a batching model's
            // lone item is already the stack of one: it only gets its batch dimension back.
            Some(Ok(outputs)) if !config.batches => Answer::Success(outputs),
            Some(Ok(outputs)) => Answer::Success(
                outputs
                    .into_iter()
                    .map(|mut tensor| {
                        tensor.shape.insert(0, 1);
                        tensor
                    })
                    .collect(),
            ),
            Some(Err(error)) => Answer::Failure(error),
            None => Answer::Failure(ItemError::trap("no outcome")),
        };
    }
    if outcomes.iter().any(|o| o.is_err()) {
        return Answer::MultiStatus(outcomes);
    }
    stack_outputs(outcomes.into_iter().filter_map(Result::ok).collect())
}

/// Stacks every item's outputs along a new leading dimension, output by output: linear
/// in the number of outputs (each item's outputs are looked up by name through an index).
fn stack_outputs(items: Vec<Item>) -> Answer {
    let Some(first) = items.first() else {
        return Answer::Failure(ItemError::trap("no outcome"));
    };
    let indexed: Vec<std::collections::HashMap<&str, &Tensor>> = items
        .iter()
        .map(|item| item.iter().map(|t| (t.name.as_str(), t)).collect())
        .collect();
    let mut stacked = Vec::with_capacity(first.len());
    for output in first {
        let parts: Option<Vec<&Tensor>> = indexed
            .iter()
            .map(|item| item.get(output.name.as_str()).copied())
            .collect();
        let Some(parts) = parts else {
            return Answer::Failure(ItemError::trap(format!(
                "output '{}' is missing from some items",
                output.name
            )));
        };
        match Tensor::stack(parts.into_iter()) {
            Ok(tensor) => stacked.push(tensor),
            Err(e) => return Answer::Failure(ItemError::trap(format!("cannot stack the items' outputs: {e}"))),
        }
    }
    Answer::Success(stacked)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::model::tensor::DataType;

    fn config(batching: &str) -> ModelConfig {
        let text = format!(
            "[stages]\npredict = \"p.wasm\"\n[[inputs]]\nname = \"x\"\ndatatype = \"FP32\"\nshape = [-1]\n{batching}"
        );
        ModelConfig::parse(Path::new("/m/model"), &text).unwrap()
    }

    fn x(shape: &[u64]) -> Tensor {
        let count = shape.iter().product::<u64>() as usize;
        Tensor {
            name: "x".into(),
            datatype: DataType::Fp32,
            shape: shape.to_vec(),
            data: (0..count).flat_map(|i| (i as f32).to_le_bytes()).collect(),
        }
    }

    #[test]
    fn batching_models_split_along_the_leading_dimension() {
        let c = config("[batching]\nmax_batch_size = 4");
        let items = split_request(&c, vec![x(&[3, 2])]).unwrap();
        assert_eq!(items.len(), 3);
        assert_eq!(items[2][0].shape, vec![2]);
        assert_eq!(items[2][0].data, [4f32.to_le_bytes(), 5f32.to_le_bytes()].concat());
    }

    #[test]
    fn models_without_batching_take_the_request_whole() {
        let c = config("");
        let items = split_request(&c, vec![x(&[7])]).unwrap();
        assert_eq!(items.len(), 1);
        assert_eq!(items[0][0].shape, vec![7]);
    }

    #[test]
    fn huge_batches_of_empty_items_are_refused_before_splitting() {
        let c = config("[batching]\nmax_batch_size = 4\nmax_queue_size = 16");
        let err = split_request(&c, vec![x(&[1_000_000, 0])]).unwrap_err();
        assert!(err.to_string().contains("queues at most 16"), "{err}");
        assert!(split_request(&c, vec![x(&[0, 1])]).is_err());
    }

    #[test]
    fn answers_are_success_single_failure_or_multi_status() {
        let c = config("[batching]\nmax_batch_size = 4");
        let ok = |v: f32| {
            Ok(vec![x(&[1]).clone()]).map(|mut item: Item| {
                item[0].data = v.to_le_bytes().to_vec();
                item
            })
        };
        match assemble(&c, vec![ok(1.0), ok(2.0)]) {
            Answer::Success(outputs) => assert_eq!(outputs[0].shape, vec![2, 1]),
            other => panic!("{other:?}"),
        }
        match assemble(&c, vec![Err(ItemError::new(422, "no"))]) {
            Answer::Failure(e) => assert_eq!(e.status, 422),
            other => panic!("{other:?}"),
        }
        match assemble(&c, vec![ok(1.0), Err(ItemError::new(400, "bad"))]) {
            Answer::MultiStatus(outcomes) => assert_eq!(outcomes.len(), 2),
            other => panic!("{other:?}"),
        }
    }
}
