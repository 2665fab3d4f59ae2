//! The {{stage}} stage of {{name}}: passes each item's `{{tensor}}: FP32 [1]` on{{flow}};
//! an item whose `{{tensor}}` {{refusal}} fails alone with 422.

use tensorplug_guest::prelude::*;

struct Checker;

impl {{Stage}}or for Checker {
    fn init(_parameters: Parameters) -> Result<Self, String> {
        Ok(Checker)
    }

    fn {{stage}}(&mut self, items: Vec<Item>) -> Vec<Result<Item, ItemError>> {
        items.into_iter().map(check).collect()
    }
}

fn check(item: Item) -> Result<Item, ItemError> {
    let value = item.input("{{tensor}}")?;
    value.expect_shape(&[1])?;
    let v = value.values::<f32>()?[0];
    if v {{refused_if}} {
        return Err(ItemError::unprocessable(format!(
            "{{tensor}}: {v} {{refusal}} (checked by {{stage}})"
        )));
    }
    Ok(item)
}

export_{{stage}}or!(Checker);
