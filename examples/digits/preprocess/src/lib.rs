//! The digits model's preprocess stage: accepts one 8x8 image per item as
//! `input-0: FP32 [64]` or `[8, 8]`, rejects pixels that are not finite or outside
//! `0..=pixel_max` (parameter, default 16) with a 400 naming the pixel, and hands predict
//! `input-0: FP32 [64]`.

use tensorplug_guest::prelude::*;

const INPUT: &str = "input-0";

struct Digits {
    /// The largest valid pixel value, from the `pixel_max` parameter.
    pixel_max: f32,
}

impl Preprocessor for Digits {
    fn init(parameters: Parameters) -> Result<Self, String> {
        let pixel_max: f32 = parameters.parse_or("pixel_max", 16.0)?;
        if !(pixel_max.is_finite() && pixel_max > 0.0) {
            return Err(format!("parameter 'pixel_max': {pixel_max} is not a positive number"));
        }
        Ok(Digits { pixel_max })
    }

    fn preprocess(&mut self, items: Vec<Item>) -> Vec<Result<Item, ItemError>> {
        items.into_iter().map(|item| flatten(item, self.pixel_max)).collect()
    }
}

fn flatten(mut item: Item, max: f32) -> Result<Item, ItemError> {
    let image = item.take_input(INPUT)?;
    image.expect_datatype(Datatype::Fp32)?;
    let square = image.expect_any_shape(&[&[64], &[8, 8]])? == 1;
    let pixels = image.values::<f32>()?;
    // NaN is in no range, so this one test also catches non-finite values.
    if let Some(i) = pixels.iter().position(|v| !(0.0..=max).contains(v)) {
        let v = pixels[i];
        // Name the pixel the way the client shaped the image.
        let at = if square {
            format!("{INPUT}[{}, {}]", i / 8, i % 8)
        } else {
            format!("{INPUT}[{i}]")
        };
        let why = if v.is_finite() {
            format!("is outside 0..{max}")
        } else {
            "is not finite".to_string()
        };
        return Err(ItemError::bad_request(format!("{at}: pixel value {v} {why}")));
    }
    // The data is already row-major, so flattening is only a new shape.
    Ok(vec![Tensor {
        shape: vec![64],
        ..image
    }])
}

export_preprocessor!(Digits);
