//! The predict stage of {{name}}: `y = 2 * x` for a batch of `x: FP32 [N, 1]`; an item
//! whose `x` is negative fails alone with 422, its neighbours get their `y`.

use tensorplug_guest::prelude::*;

struct Doubler;

impl Predictor for Doubler {
    fn init(_parameters: Parameters) -> Result<Self, String> {
        Ok(Doubler)
    }

    fn predict(&mut self, batch: Vec<Tensor>) -> Result<Prediction, ItemError> {
        let x = batch.input("x")?;
        x.expect_shape(&[-1, 1])?;
        let mut y = Vec::new();
        let mut failures = Vec::new();
        for (i, &v) in x.values::<f32>()?.iter().enumerate() {
            if v < 0.0 {
                failures.push(ItemError::unprocessable(format!("x: {v} is negative")).at(i as u32));
            }
            y.push(2.0 * v);
        }
        Ok(Prediction::with_failures(vec![Tensor::from_f32("y", &x.shape, &y)], failures))
    }
}

export_predictor!(Doubler);
