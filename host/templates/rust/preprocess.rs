//! The preprocess stage of {{name}}: passes each item's `x: FP32 [1]` on to predict; an
//! item whose `x` is negative fails alone with 422.

use tensorplug_guest::prelude::*;

struct Checker;

impl Preprocessor for Checker {
    fn init(_parameters: Parameters) -> Result<Self, String> {
        Ok(Checker)
    }

    fn preprocess(&mut self, items: Vec<Item>) -> Vec<Result<Item, ItemError>> {
        items.into_iter().map(check).collect()
    }
}

fn check(item: Item) -> Result<Item, ItemError> {
    let x = item.input("x")?;
    x.expect_shape(&[1])?;
    let v = x.values::<f32>()?[0];
    if v < 0.0 {
        return Err(ItemError::unprocessable(format!(
            "x: {v} is negative (checked by preprocess)"
        )));
    }
    Ok(item)
}

export_preprocessor!(Checker);
