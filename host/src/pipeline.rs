//! One model instance's pipeline: preprocess → predict → postprocess over a batch of
//! items, with every item ending in its own outcome.
//!
//! What this module guarantees, whatever a plugin does:
//! - **Per-item outcomes.** A plugin's item errors stay with their items; items that fail
//!   a stage skip the later ones.
//! - **Trap isolation by bisection.** When a call traps (panic, out of memory, stack
//!   overflow, time limit) or breaks the plugin contract, the instance is replaced and
//!   the call's items are split in halves and re-run, recursively, until each culprit is
//!   alone. Culprits get 500 (504 for a time limit); everyone else gets the answer they
//!   would have got alone. For a call of `n` items of which `k` are culprits, this costs
//!   at most `2·k·⌈log2 n⌉` extra calls, and nothing when no call fails. A time limit
//!   is the exception: halving would pay a full deadline per level, so the items are
//!   re-run one by one instead (`n` short calls, plus one more deadline per slow item).
//! - **Contract checks.** Result counts, batch sizes, output names, datatypes and shapes,
//!   and failure indices are all checked; violations are answered as 500 naming the
//!   stage and the violation.
//!
//! Items whose per-item shapes differ are sent to predict in separate sub-batches.

use std::sync::Arc;

use crate::model_config::TensorSpec;
use crate::outcome::{ItemError, ItemOutcome};
use crate::runtime::{Prediction, RuntimeError, StageInstance, StageTemplate, Trapped};
use crate::tensor::{Item, Tensor};

/// The compiled stages of one model version; instances are made from it.
pub struct PipelineTemplate {
    pub preprocess: Option<Arc<StageTemplate>>,
    pub predict: Arc<StageTemplate>,
    pub postprocess: Option<Arc<StageTemplate>>,
    /// The declared outputs every final item is checked against.
    pub outputs: Vec<TensorSpec>,
}

impl PipelineTemplate {
    /// A live instance of every stage, initialised.
    pub fn instantiate(self: &Arc<Self>) -> Result<PipelineInstance, RuntimeError> {
        let slot = |t: &Arc<StageTemplate>| -> Result<Slot, RuntimeError> {
            Ok(Slot {
                live: Some(t.instantiate()?),
                template: t.clone(),
                traps: 0,
            })
        };
        Ok(PipelineInstance {
            preprocess: self.preprocess.as_ref().map(slot).transpose()?,
            predict: slot(&self.predict)?,
            postprocess: self.postprocess.as_ref().map(slot).transpose()?,
            template: self.clone(),
        })
    }
}

/// One stage's live instance, replaced after every trap.
struct Slot {
    template: Arc<StageTemplate>,
    live: Option<StageInstance>,
    traps: u64,
}

impl Slot {
    fn instance(&mut self) -> Result<&mut StageInstance, ItemError> {
        let live = match self.live.take() {
            Some(live) => live,
            None => self.template.instantiate().map_err(|e| {
                ItemError::unavailable(format!(
                    "{} instance could not be re-created: {e}",
                    self.template.kind().name()
                ))
            })?,
        };
        Ok(self.live.insert(live))
    }

    /// Drops a trapped instance and builds its replacement right away, so the next call
    /// does not pay for it.
    fn replace(&mut self, trapped: &Trapped) {
        self.traps += 1;
        self.live = None;
        tracing::warn!(
            stage = self.template.kind().name(),
            traps = self.traps,
            "plugin trapped: {}",
            trapped.message
        );
        if let Err(e) = self.instance() {
            tracing::error!(stage = self.template.kind().name(), "{}", e.message);
        }
    }
}

/// A full set of live stage instances; runs batches one at a time.
pub struct PipelineInstance {
    template: Arc<PipelineTemplate>,
    preprocess: Option<Slot>,
    predict: Slot,
    postprocess: Option<Slot>,
}

/// What one failed call means for the items in it.
enum CallFailure {
    /// Replace the instance and bisect.
    Trapped(Trapped),
    /// The plugin answered, but broke the contract: bisect without replacing.
    Violation(String),
    /// Every item of the call gets this answer (e.g. predict failed the whole batch).
    All(ItemError),
}

impl PipelineInstance {
    /// Traps seen by this instance's stages so far.
    pub fn traps(&self) -> u64 {
        let optional = |slot: &Option<Slot>| slot.as_ref().map_or(0, |s| s.traps);
        optional(&self.preprocess) + self.predict.traps + optional(&self.postprocess)
    }

    /// A brand-new set of instances from the same template.
    pub fn fresh(&self) -> Result<PipelineInstance, RuntimeError> {
        self.template.instantiate()
    }

    /// Whether every stage has a live instance (a failed replacement leaves a hole that
    /// the next call retries).
    pub fn is_whole(&self) -> bool {
        let live = |slot: &Option<Slot>| slot.as_ref().is_none_or(|s| s.live.is_some());
        live(&self.preprocess) && self.predict.live.is_some() && live(&self.postprocess)
    }

    /// Runs `items` through every stage; one outcome per item, in order.
    pub fn run(&mut self, items: Vec<Item>) -> Vec<ItemOutcome> {
        let mut outcomes: Vec<Option<ItemOutcome>> = vec![None; items.len()];
        let mut alive: Vec<Indexed> = items.into_iter().enumerate().collect();

        // The last stage's answers are checked against the declared outputs inside its
        // call, so that a violation is bisected down to the items that cause it.
        let declared = self.template.outputs.as_slice();
        let last_is_predict = self.postprocess.is_none();
        if let Some(slot) = self.preprocess.as_mut() {
            let call = |instance: &mut StageInstance, items: &[Indexed]| map_items(instance, items, &[]);
            alive = settle(&mut outcomes, run_bisected(slot, alive, &call));
        }
        let predict_declared = if last_is_predict { declared } else { &[] };
        alive = settle(&mut outcomes, run_predict(&mut self.predict, alive, predict_declared));
        if let Some(slot) = self.postprocess.as_mut() {
            let call = |instance: &mut StageInstance, items: &[Indexed]| map_items(instance, items, declared);
            alive = settle(&mut outcomes, run_bisected(slot, alive, &call));
        }
        for (index, item) in alive {
            outcomes[index] = Some(Ok(item));
        }
        outcomes
            .into_iter()
            .map(|o| o.unwrap_or_else(|| Err(ItemError::trap("item lost in the pipeline"))))
            .collect()
    }
}

/// Records failed items' outcomes and returns the survivors for the next stage.
fn settle(outcomes: &mut [Option<ItemOutcome>], results: Vec<(usize, ItemOutcome)>) -> Vec<Indexed> {
    let mut alive = Vec::with_capacity(results.len());
    for (index, result) in results {
        match result {
            Ok(item) => alive.push((index, item)),
            Err(e) => outcomes[index] = Some(Err(e)),
        }
    }
    alive
}

/// An item with its position in the batch the pipeline was given.
type Indexed = (usize, Item);

/// One call of a stage on some items, checked against the plugin contract.
type StageCall<'a> = dyn Fn(&mut StageInstance, &[Indexed]) -> Result<Vec<ItemOutcome>, CallFailure> + 'a;

/// Calls a stage on `items`; on a trap or contract violation, replaces the instance if
/// needed and re-runs each half, until the failing items are isolated.
fn run_bisected(slot: &mut Slot, items: Vec<Indexed>, call: &StageCall<'_>) -> Vec<(usize, ItemOutcome)> {
    if items.is_empty() {
        return Vec::new();
    }
    let instance = match slot.instance() {
        Ok(instance) => instance,
        Err(e) => return items.into_iter().map(|(i, _)| (i, Err(e.clone()))).collect(),
    };
    let failure = match call(instance, &items) {
        Ok(results) => return items.into_iter().map(|(i, _)| i).zip(results).collect(),
        Err(failure) => failure,
    };
    let mut deadline = false;
    let error = match failure {
        CallFailure::All(error) => return items.into_iter().map(|(i, _)| (i, Err(error.clone()))).collect(),
        CallFailure::Trapped(trapped) => {
            slot.replace(&trapped);
            deadline = trapped.deadline;
            trapped.item_error()
        }
        CallFailure::Violation(message) => ItemError::trap(message),
    };
    if items.len() == 1 {
        return items.into_iter().map(|(i, _)| (i, Err(error.clone()))).collect();
    }
    // A time limit costs a full deadline per failed call, so halving would cost one per
    // level; running each item alone costs only one more (per slow item).
    let parts: Vec<Vec<Indexed>> = if deadline {
        items.into_iter().map(|item| vec![item]).collect()
    } else {
        let mut first = items;
        let second = first.split_off(first.len() / 2);
        vec![first, second]
    };
    parts
        .into_iter()
        .flat_map(|part| run_bisected(slot, part, call))
        .collect()
}

/// preprocess/postprocess: one result per item.
fn map_items(
    instance: &mut StageInstance,
    items: &[Indexed],
    declared: &[TensorSpec],
) -> Result<Vec<ItemOutcome>, CallFailure> {
    let kind = instance.template().kind();
    let sent: Vec<Item> = items.iter().map(|(_, item)| item.clone()).collect();
    let results = instance.map_items(sent).map_err(CallFailure::Trapped)?;
    if results.len() != items.len() {
        return Err(CallFailure::Violation(format!(
            "{} broke the plugin contract: returned {} results for {} items",
            kind.name(),
            results.len(),
            items.len()
        )));
    }
    check_declared(kind.name(), declared, &results)?;
    Ok(results)
}

/// Groups items by their per-item shapes and runs each group through predict.
fn run_predict(slot: &mut Slot, items: Vec<Indexed>, declared: &[TensorSpec]) -> Vec<(usize, ItemOutcome)> {
    let call = |instance: &mut StageInstance, items: &[Indexed]| predict_batch(instance, items, declared);
    group_by_shape(items)
        .into_iter()
        .flat_map(|group| run_bisected(slot, group, &call))
        .collect()
}

/// Splits items into groups whose tensors agree in names, datatypes and shapes (the
/// sub-batches predict can take), keeping first-seen order.
fn group_by_shape(items: Vec<Indexed>) -> Vec<Vec<Indexed>> {
    let mut groups: Vec<(Vec<Signature>, Vec<Indexed>)> = Vec::new();
    for (index, item) in items {
        let signature = signature(&item);
        match groups.iter_mut().find(|(s, _)| *s == signature) {
            Some((_, members)) => members.push((index, item)),
            None => groups.push((signature, vec![(index, item)])),
        }
    }
    groups.into_iter().map(|(_, members)| members).collect()
}

type Signature = (String, crate::tensor::DataType, Vec<u64>);

fn signature(item: &Item) -> Vec<Signature> {
    item.iter()
        .map(|t| (t.name.clone(), t.datatype, t.shape.clone()))
        .collect()
}

/// Stacks a group into a batch, calls predict, checks the answer and splits it per item.
fn predict_batch(
    instance: &mut StageInstance,
    items: &[Indexed],
    declared: &[TensorSpec],
) -> Result<Vec<ItemOutcome>, CallFailure> {
    let n = items.len();
    let Some((_, first)) = items.first() else {
        return Ok(Vec::new());
    };
    let mut batch = Vec::with_capacity(first.len());
    for (position, _) in first.iter().enumerate() {
        let stacked = Tensor::stack(items.iter().map(|(_, item)| &item[position]))
            .map_err(|e| CallFailure::All(ItemError::trap(format!("cannot form a batch: {e}"))))?;
        batch.push(stacked);
    }
    let prediction = match instance.predict(batch).map_err(CallFailure::Trapped)? {
        Ok(prediction) => prediction,
        Err(error) => return Err(CallFailure::All(error)),
    };
    let results = split_prediction(prediction, n)
        .map_err(|violation| CallFailure::Violation(format!("predict broke the plugin contract: {violation}")))?;
    check_declared("predict", declared, &results)?;
    Ok(results)
}

/// Splits batched outputs into per-item outputs, applying per-item failures.
fn split_prediction(prediction: Prediction, n: usize) -> Result<Vec<ItemOutcome>, String> {
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

/// Checks the last stage's items against the model's declared outputs.
fn check_declared(stage: &str, declared: &[TensorSpec], results: &[ItemOutcome]) -> Result<(), CallFailure> {
    for item in results.iter().filter_map(|r| r.as_ref().ok()) {
        check_outputs(declared, item).map_err(|violation| {
            CallFailure::Violation(format!("{stage} broke the model's declared outputs: {violation}"))
        })?;
    }
    Ok(())
}

/// Checks one final item against the declared outputs (names, datatypes, shapes).
fn check_outputs(declared: &[TensorSpec], item: &Item) -> Result<(), String> {
    if declared.is_empty() {
        return Ok(());
    }
    for spec in declared {
        let Some(tensor) = item.iter().find(|t| t.name == spec.name) else {
            return Err(format!("output '{}' is missing", spec.name));
        };
        if tensor.datatype != spec.datatype {
            return Err(format!(
                "output '{}' is {}, declared {}",
                spec.name, tensor.datatype, spec.datatype
            ));
        }
        if !spec.accepts_shape(&tensor.shape) {
            return Err(format!(
                "output '{}' has shape {:?}, declared {}",
                spec.name,
                tensor.shape,
                spec.describe_shapes()
            ));
        }
    }
    if let Some(extra) = item.iter().find(|t| !declared.iter().any(|s| s.name == t.name)) {
        return Err(format!("output '{}' is not declared", extra.name));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::DataType;

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
        let groups = group_by_shape(items);
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
