//! The digits model's predict stage: loads the MLP's weights from the model folder at
//! `init` and classifies a batch `input-0: FP32 [N, 64]` into `probabilities: FP32 [N, 10]`
//! and `label: INT64 [N]`.

use digits_model::{forward, Weights, CLASSES, INPUTS};
use tensorplug_guest::prelude::*;
use tensorplug_guest::MODEL_DIR;

struct Digits {
    /// Loaded once per instance by `init`.
    weights: Weights,
}

impl Predictor for Digits {
    fn init(_: Parameters) -> Result<Self, String> {
        let weights = Weights::from_dir(MODEL_DIR).map_err(|e| format!("digits: {e}"))?;
        log::debug(&format!("digits: weights loaded from {MODEL_DIR}"));
        // What clients read in the model's metadata (`parameters`).
        metadata::declare("labels", "0,1,2,3,4,5,6,7,8,9")?;
        metadata::declare(
            "description",
            "A multi-layer perceptron trained with scikit-learn on its 8x8 handwritten digits",
        )?;
        Ok(Digits { weights })
    }

    fn predict(&mut self, batch: Vec<Tensor>) -> Result<Prediction, ItemError> {
        let x = batch.input("input-0")?;
        x.expect_shape(&[-1, INPUTS as i64])?;
        let n = x.batch_size()?;
        let pixels = x.values::<f32>()?;

        let mut proba = vec![0.0; n * CLASSES];
        let mut labels = vec![0; n];
        forward(&self.weights, &pixels, n, &mut proba, &mut labels);

        let rows = n as u64;
        Ok(Prediction::new(vec![
            Tensor::from_f32("probabilities", &[rows, CLASSES as u64], &proba),
            Tensor::from_i64("label", &[rows], &labels),
        ]))
    }
}

export_predictor!(Digits);
