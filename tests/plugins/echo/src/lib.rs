//! A predictor for tests: answers every batch input unchanged, as an output of the same
//! name. Behind a real preprocessor it exposes what that stage hands predict, as the host
//! batched it (tests/models/minilm-tokens: the tokenizer's `input_ids` and
//! `attention_mask`, padded to the batch's longest item).

use tensorplug_guest::prelude::*;

struct Echo;

impl Predictor for Echo {
    fn init(_: Parameters) -> Result<Self, String> {
        Ok(Echo)
    }

    fn predict(&mut self, batch: Vec<Tensor>) -> Result<Prediction, ItemError> {
        Ok(Prediction::new(batch))
    }
}

export_predictor!(Echo);
