//! From a request's tensors to items, and from items' outcomes back to one answer.
//!
//! Shared by every edge (REST, gRPC, the in-process CLI): checks inputs against the
//! model's declared inputs, splits a batching model's request along its leading
//! dimension, and decides whether the request's answer is a plain success, one error, or
//! a per-item (multi-status) answer.

use crate::error::ServeError;
use crate::model_config::ModelConfig;
use crate::outcome::{ItemError, ItemOutcome};
use crate::tensor::{Item, Tensor};

/// Checks `inputs` against the model's declared inputs and splits them into items.
pub fn split_request(config: &ModelConfig, mut inputs: Vec<Tensor>) -> Result<Vec<Item>, ServeError> {
    let invalid = ServeError::InvalidInput;
    for tensor in &inputs {
        let Some(spec) = config.inputs.iter().find(|s| s.name == tensor.name) else {
            let names: Vec<&str> = config.inputs.iter().map(|s| s.name.as_str()).collect();
            return Err(invalid(format!(
                "unknown input '{}': model '{}' takes {}",
                tensor.name,
                config.name,
                names.join(", ")
            )));
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
    if outcomes.len() == 1 && !config.batches {
        return match outcomes.pop() {
            Some(Ok(outputs)) => Answer::Success(outputs),
            Some(Err(error)) => Answer::Failure(error),
            None => Answer::Failure(ItemError::trap("no outcome")),
        };
    }
    if outcomes.iter().any(|o| o.is_err()) {
        if outcomes.len() == 1 {
            if let Some(Err(error)) = outcomes.pop() {
                return Answer::Failure(error);
            }
        }
        return Answer::MultiStatus(outcomes);
    }
    let items: Vec<Item> = outcomes.into_iter().filter_map(Result::ok).collect();
    let Some(first) = items.first() else {
        return Answer::Failure(ItemError::trap("no outcome"));
    };
    let mut stacked = Vec::with_capacity(first.len());
    for output in first {
        let parts: Option<Vec<&Tensor>> = items
            .iter()
            .map(|item| item.iter().find(|t| t.name == output.name))
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
