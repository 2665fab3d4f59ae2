//! The postprocess stage of {{name}}: passes each item's `y: FP32 [1]` from predict on;
//! an item whose `y` is over 100 fails alone with 422.

use tensorplug_guest::prelude::*;

struct Checker;

impl Postprocessor for Checker {
    fn init(_parameters: Parameters) -> Result<Self, String> {
        Ok(Checker)
    }

    fn postprocess(&mut self, items: Vec<Item>) -> Vec<Result<Item, ItemError>> {
        items.into_iter().map(check).collect()
    }
}

fn check(item: Item) -> Result<Item, ItemError> {
    let y = item.input("y")?;
    y.expect_shape(&[1])?;
    let v = y.values::<f32>()?[0];
    if v > 100.0 {
        return Err(ItemError::unprocessable(format!(
            "y: {v} is over 100 (checked by postprocess)"
        )));
    }
    Ok(item)
}

export_postprocessor!(Checker);
