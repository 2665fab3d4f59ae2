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
    items: &mut [Indexed],
    declared: &[TensorSpec],
) -> Result<Vec<ItemOutcome>, CallFailure> {
    let kind = instance.template().kind();
    let results = instance
        .map_items(items.iter_mut().map(|(_, item)| item))
        .map_err(CallFailure::Trapped)?;
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
    // This runs for every item of every call, and items carry a handful of tensors:
    // comparing with the names before costs less than hashing (and allocates nothing)
    // up to FEW names; a set takes over beyond.
    const FEW: usize = 8;
    let mut few = [""; FEW];
    let mut many: Option<std::collections::HashSet<&str>> = None;
    for (count, name) in names.enumerate() {
        if count == MAX_TENSORS_PER_ITEM {
            return Err(format!("more than {MAX_TENSORS_PER_ITEM} tensors per item"));
        }
        let repeated = match &mut many {
            Some(seen) => !seen.insert(name),
            None if count < FEW => {
                let repeated = few[..count].contains(&name);
                few[count] = name;
                repeated
            }
            None => {
                let mut seen: std::collections::HashSet<&str> = few.into_iter().collect();
                let repeated = !seen.insert(name);
                many = Some(seen);
                repeated
            }
        };
        if repeated {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[String]) -> Result<(), String> {
        check_names(list.iter().map(String::as_str))
    }

    #[test]
    fn repeated_names_are_found_among_few_and_among_many() {
        let distinct = |n: usize| -> Vec<String> { (0..n).map(|i| format!("t{i}")).collect() };
        for n in [0, 1, 7, 8, 9, 40, MAX_TENSORS_PER_ITEM] {
            assert_eq!(names(&distinct(n)), Ok(()), "{n} distinct names");
        }
        // A repeat within the first few, at the switch to a set, and well beyond it.
        for (n, repeat_of) in [(3, 1), (8, 0), (9, 3), (9, 8), (40, 2), (40, 30)] {
            let mut list = distinct(n);
            list.push(list[repeat_of].clone());
            let error = names(&list).expect_err("a repeated name");
            assert_eq!(error, format!("output 't{repeat_of}' appears more than once"), "{n}");
        }
        let error = names(&distinct(MAX_TENSORS_PER_ITEM + 1)).expect_err("too many");
        assert!(error.contains("more than 256 tensors"), "{error}");
    }
}
