//! The digits-onnx model's predict stage: the digits MLP as an ONNX graph
//! (`digits.onnx`, named `digits` in model.toml's `[graphs]`), run natively by the host
//! through `wasi:nn`. Same inputs and outputs as the hand-written `digits` predictor:
//! `input-0: FP32 [N, 64]` in, `probabilities: FP32 [N, 10]` and `label: INT64 [N]` out.
//!
//! The parameter `graph` names another graph of the same signature: the `digits-cnn`
//! model runs its convolutional net with this same plugin.

use tensorplug_guest::prelude::*;

struct DigitsOnnx {
    graph: nn::Graph,
}

impl Predictor for DigitsOnnx {
    fn init(parameters: Parameters) -> Result<Self, String> {
        metadata::declare("labels", "0,1,2,3,4,5,6,7,8,9")?;
        let name: String = parameters.parse_or("graph", "digits".to_string())?;
        Ok(DigitsOnnx {
            graph: nn::Graph::by_name(&name)?,
        })
    }

    fn predict(&mut self, batch: Vec<Tensor>) -> Result<Prediction, ItemError> {
        // The graph checks names, types and shapes itself (a mismatch is a 400).
        let x = batch.input("input-0")?;
        Ok(Prediction::new(self.graph.compute(std::slice::from_ref(x))?))
    }
}

export_predictor!(DigitsOnnx);
