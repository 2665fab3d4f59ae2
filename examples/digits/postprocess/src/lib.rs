//! The digits model's postprocess stage: per item, checks predict's `probabilities: FP32
//! [10]` (they must sum to 1, else the item fails with 500) and `label: INT64 []`, and
//! answers `probabilities: FP32 [10]` and `label: INT64 [1]`.

use tensorplug_guest::prelude::*;

/// How far the sum of the probabilities may stray from 1 (f32 rounding over 10 terms is
/// ~1e-6; anything larger means predict is broken).
const SUM_TOLERANCE: f32 = 1e-4;

struct Digits;

impl Postprocessor for Digits {
    fn init(_: Parameters) -> Result<Self, String> {
        Ok(Digits)
    }

    fn postprocess(&mut self, items: Vec<Item>) -> Vec<Result<Item, ItemError>> {
        items.into_iter().map(finish).collect()
    }
}

fn finish(mut item: Item) -> Result<Item, ItemError> {
    let probabilities = item.take_input("probabilities")?;
    probabilities.expect_shape(&[10])?;
    let sum: f32 = probabilities.values::<f32>()?.iter().sum();
    if sum.is_nan() || (sum - 1.0).abs() > SUM_TOLERANCE {
        return Err(ItemError::internal(format!(
            "digits: probabilities sum to {sum}, not 1"
        )));
    }

    let label = item.take_input("label")?;
    label.expect_any_shape(&[&[], &[1]])?;
    let class = label.to_i64()?[0];
    if !(0..10).contains(&class) {
        return Err(ItemError::internal(format!("digits: label {class} is not a digit")));
    }
    Ok(vec![
        probabilities,
        Tensor {
            shape: vec![1],
            ..label
        },
    ])
}

export_postprocessor!(Digits);
