//! The plugin contract, checked on every answer: one result per item for item-wise
//! stages, and the model's declared outputs (names, datatypes, shapes) for the last
//! stage. A violation is answered as 500 naming the stage and what it broke, and is
//! bisected like a trap.

use super::bisect::{CallFailure, Indexed};
use crate::model::config::TensorSpec;
use crate::model::outcome::ItemOutcome;
use crate::model::tensor::Item;
use crate::runtime::StageInstance;

/// preprocess/postprocess: one result per item.
pub(crate) fn map_items(
    instance: &mut StageInstance,
    items: &[Indexed],
    declared: &[TensorSpec],
) -> Result<Vec<ItemOutcome>, CallFailure> {
    let kind = instance.template().kind();
    // A copy goes in: after a trap the items must be re-run (bisection), and what crosses
    // into the plugin does not come back.
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
    for item in results.iter().filter_map(|r| r.as_ref().ok()) {
        check_names(item.iter().map(|t| t.name.as_str())).map_err(|violation| {
            CallFailure::Violation(format!("{} broke the plugin contract: {violation}", kind.name()))
        })?;
    }
    check_declared(kind.name(), declared, &results)?;
    Ok(results)
}

/// Most tensors one item may carry out of a stage. Declared outputs bound a model's
/// answer already; this bounds the answer of a model that declares none (and what any
/// stage hands the next).
pub const MAX_TENSORS_PER_ITEM: usize = 256;

/// Checks that an item's (or a batch's) tensor names are unique and not too many.
pub(crate) fn check_names<'a>(names: impl Iterator<Item = &'a str>) -> Result<(), String> {
    let mut seen = std::collections::HashSet::new();
    for name in names {
        if seen.len() == MAX_TENSORS_PER_ITEM {
            return Err(format!("more than {MAX_TENSORS_PER_ITEM} tensors per item"));
        }
        if !seen.insert(name) {
            return Err(format!(
                "output '{}' appears more than once",
                crate::model::text::clip(name)
            ));
        }
    }
    Ok(())
}

/// Checks the last stage's items against the model's declared outputs.
pub(crate) fn check_declared(stage: &str, declared: &[TensorSpec], results: &[ItemOutcome]) -> Result<(), CallFailure> {
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
