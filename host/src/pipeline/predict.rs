//! The predict stage: items grouped into sub-batches predict can take, stacked (ragged
//! tensors padded, [`crate::model::padding`]), called, checked, and split back per item.

use super::bisect::{run_bisected, Audience, CallFailure, Deferred, Indexed};
use super::contract::{check_declared, check_names};
use super::slot::Slot;
use crate::model::config::TensorSpec;
use crate::model::outcome::{ItemError, ItemOutcome};
use std::cell::Cell;

use crate::model::padding::{buckets, PadValue, Padding};
use crate::model::tensor::{DataType, Item, Tensor};
use crate::runtime::{Prediction, StageInstance};

/// Elements of ragged tensors handed to predict: the items' own and the padding added.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PaddingCount {
    pub ragged: u64,
    pub padding: u64,
}

/// Groups items into sub-batches (one shape each; ragged tensors by length buckets) and
/// runs each through predict; also what the calls' ragged tensors held.
pub(crate) fn run_predict(
    slot: &mut Slot,
    items: Vec<Indexed>,
    audience: &dyn Audience,
    (declared, padding): (&[TensorSpec], &Padding),
    deferred: &mut Deferred,
) -> (Vec<(usize, ItemOutcome)>, PaddingCount) {
    let counted = Cell::new(PaddingCount::default());
    let call = |instance: &mut StageInstance, items: &mut [Indexed]| {
        predict_batch(instance, items, (declared, padding), &counted)
    };
    let outcomes = group_by_shape(items, padding)
        .into_iter()
        .flat_map(|group| bucketed(group, padding))
        .flat_map(|group| run_bisected(slot, group, audience, &call, deferred))
        .collect();
    (outcomes, counted.get())
}

/// Splits items into groups whose tensors agree in names, datatypes and shapes (the
/// sub-batches predict can take; a ragged tensor's shape only in its rank), keeping
/// first-seen order.
fn group_by_shape(items: Vec<Indexed>, padding: &Padding) -> Vec<Vec<Indexed>> {
    let mut groups: Vec<Vec<Indexed>> = Vec::new();
    for (index, item) in items {
        let group = groups
            .iter_mut()
            .find(|group| group.first().is_some_and(|(_, first)| stackable(first, &item, padding)));
        match group {
            Some(members) => members.push((index, item)),
            None => groups.push(vec![(index, item)]),
        }
    }
    groups
}

/// Whether two items' tensors agree in names, datatypes and shapes (ragged ones: ranks).
fn stackable(a: &Item, b: &Item, padding: &Padding) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.name == y.name
                && x.datatype == y.datatype
                && if padding.is_ragged(x) {
                    x.shape.len() == y.shape.len()
                } else {
                    x.shape == y.shape
                }
        })
}

/// A group of items with ragged tensors as length buckets within the model's padding
/// bound; any other group as it is.
fn bucketed(group: Vec<Indexed>, padding: &Padding) -> Vec<Vec<Indexed>> {
    // Most models have no ragged tensors: nothing to look at, nothing allocated.
    if padding.is_empty() || group.len() < 2 {
        return vec![group];
    }
    let shapes: Vec<Vec<&[u64]>> = group
        .iter()
        .map(|(_, item)| {
            item.iter()
                .filter(|t| padding.is_ragged(t))
                .map(|t| t.shape.as_slice())
                .collect()
        })
        .collect();
    if shapes.first().is_none_or(Vec::is_empty) {
        return vec![group];
    }
    let plan = buckets(&shapes, padding.max_padding);
    let mut members: Vec<Option<Indexed>> = group.into_iter().map(Some).collect();
    plan.into_iter()
        .map(|bucket| bucket.into_iter().filter_map(|p| members[p].take()).collect())
        .collect()
}

/// Stacks a group into a batch, calls predict, checks the answer and splits it per item.
fn predict_batch(
    instance: &mut StageInstance,
    items: &[Indexed],
    (declared, padding): (&[TensorSpec], &Padding),
    counted: &Cell<PaddingCount>,
) -> Result<Vec<ItemOutcome>, CallFailure> {
    let n = items.len();
    let Some((_, first)) = items.first() else {
        return Ok(Vec::new());
    };
    let mut batch = Vec::with_capacity(first.len());
    let mut count = counted.get();
    for (position, tensor) in first.iter().enumerate() {
        let pad = padding.pad_value(&tensor.name).map(|pad| (pad, tensor.datatype));
        let (stacked, added) = stacked(items, position, pad)?;
        if pad.is_some() {
            count.padding += added;
            count.ragged += stacked.element_count() - added;
        }
        batch.push(stacked);
    }
    counted.set(count);
    let prediction = match instance.predict(batch).map_err(CallFailure::Trapped)? {
        Ok(prediction) => prediction,
        Err(error) => return Err(CallFailure::All(error)),
    };
    let results = split_prediction(prediction, n)
        .map_err(|violation| CallFailure::Violation(format!("predict broke the plugin contract: {violation}")))?;
    check_declared("predict", declared, &results)?;
    Ok(results)
}

/// The items' tensors at `position` stacked, padded with `pad` when they are ragged; and
/// how many elements are padding.
fn stacked(
    items: &[Indexed],
    position: usize,
    pad: Option<(PadValue, DataType)>,
) -> Result<(Tensor, u64), CallFailure> {
    let failed = |e: String| CallFailure::All(ItemError::trap(format!("cannot form a batch: {e}")));
    let parts = items.iter().map(|(_, item)| &item[position]);
    match pad {
        None => Tensor::stack(parts).map(|t| (t, 0)).map_err(|e| failed(e.to_string())),
        Some((value, datatype)) => {
            let element = value
                .element(datatype)
                .map_err(|e| failed(format!("'{}': {e}", items[0].1[position].name)))?;
            let parts: Vec<&Tensor> = parts.collect();
            Tensor::stack_padded(&parts, &element).map_err(|e| failed(e.to_string()))
        }
    }
}

/// Splits batched outputs into per-item outputs, applying per-item failures.
fn split_prediction(prediction: Prediction, n: usize) -> Result<Vec<ItemOutcome>, String> {
    check_names(prediction.outputs.iter().map(|t| t.name.as_str()))?;
    let mut per_item: Vec<ItemOutcome> = (0..n).map(|_| Ok(Vec::new())).collect();
    for output in &prediction.outputs {
        output.validate().map_err(|e| format!("output {e}"))?;
        if output.shape.first().copied() != Some(n as u64) {
            return Err(format!(
                "output '{}' has shape {:?}, expected leading dimension {n} (the batch size)",
                output.name, output.shape
            ));
        }
    }
    for output in prediction.outputs {
        let rows = output.split_leading().map_err(|e| format!("output {e}"))?;
        for (slot, row) in per_item.iter_mut().zip(rows) {
            if let Ok(item) = slot {
                item.push(row);
            }
        }
    }
    for (index, error) in prediction.failures {
        let slot = per_item
            .get_mut(index as usize)
            .ok_or_else(|| format!("item failure index {index} is out of range for a batch of {n}"))?;
        *slot = Err(error);
    }
    Ok(per_item)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tensor::DataType;

    fn item(shape: &[u64]) -> Item {
        let count = shape.iter().product::<u64>() as usize;
        vec![Tensor {
            name: "x".into(),
            datatype: DataType::Fp32,
            shape: shape.to_vec(),
            data: vec![0; count * 4],
        }]
    }

    #[test]
    fn items_of_different_shapes_form_separate_sub_batches() {
        let items = vec![
            (0, item(&[4])),
            (1, item(&[2, 2])),
            (2, item(&[4])),
            (3, item(&[3])),
            (4, item(&[2, 2])),
        ];
        let groups = group_by_shape(items, &Padding::default());
        let indices: Vec<Vec<usize>> = groups.iter().map(|g| g.iter().map(|(i, _)| *i).collect()).collect();
        assert_eq!(indices, vec![vec![0, 2], vec![1, 4], vec![3]]);
    }

    #[test]
    fn predictions_are_split_per_item_and_checked() {
        let output = |rows: u64| Tensor {
            name: "y".into(),
            datatype: DataType::Fp32,
            shape: vec![rows, 1],
            data: (0..rows).flat_map(|r| (r as f32).to_le_bytes()).collect(),
        };
        let split = split_prediction(
            Prediction {
                outputs: vec![output(3)],
                failures: vec![(1, ItemError::new(422, "no"))],
            },
            3,
        )
        .unwrap();
        assert_eq!(split[0].as_ref().unwrap()[0].data, 0f32.to_le_bytes());
        assert_eq!(split[1].as_ref().unwrap_err().status, 422);
        assert_eq!(split[2].as_ref().unwrap()[0].shape, vec![1]);

        let wrong_rows = split_prediction(
            Prediction {
                outputs: vec![output(4)],
                failures: vec![],
            },
            3,
        );
        assert!(wrong_rows.unwrap_err().contains("expected leading dimension 3"));
        let bad_index = split_prediction(
            Prediction {
                outputs: vec![output(3)],
                failures: vec![(3, ItemError::new(400, "x"))],
            },
            3,
        );
        assert!(bad_index.unwrap_err().contains("index 3 is out of range"));
    }
}
