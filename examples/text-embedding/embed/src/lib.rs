//! The `minilm` model's predict stage: a sentence encoder as an ONNX graph (parameter
//! `graph`, default `encoder`, in model.toml's `[graphs]`; see
//! `examples/text-embedding/make_onnx.py`), run natively by the host through `wasi:nn`.
//!
//! - in: `input_ids: INT64 [N, L]` and `attention_mask: INT64 [N, L]`, the tokenizer's
//!   items padded by the host to the batch's longest with 0;
//! - out: `embedding: FP32 [N, D]` (the graph's output `embedding`, or its only output
//!   whatever its name) and `tokens: INT64 [N, 1]`, each row's sum of `attention_mask`:
//!   the item's own token count (OpenAI's `usage.prompt_tokens`).
//!
//! Inputs that do not fit the graph are refused by the host before it runs (400).

use tensorplug_guest::format_shape;
use tensorplug_guest::prelude::*;

struct Embed {
    graph: nn::Graph,
}

impl Predictor for Embed {
    fn init(parameters: Parameters) -> Result<Self, String> {
        let name: String = parameters.parse_or("graph", "encoder".to_string())?;
        Ok(Embed {
            graph: nn::Graph::by_name(&name)?,
        })
    }

    fn predict(&mut self, mut batch: Vec<Tensor>) -> Result<Prediction, ItemError> {
        let ids = batch.take_input("input_ids")?;
        let mask = batch.take_input("attention_mask")?;
        ids.expect_datatype(Datatype::Int64)?;
        mask.expect_datatype(Datatype::Int64)?;
        ids.expect_shape(&[-1, -1])?;
        if mask.shape != ids.shape {
            return Err(mask.error(format!(
                "expected the shape of input_ids, {}, got {}",
                format_shape(&ids.shape),
                format_shape(&mask.shape)
            )));
        }
        let rows = ids.batch_size()?;
        let tokens = row_sums(&mask.values::<i64>()?, rows);
        // The graph's inputs, in its order.
        let outputs = self.graph.compute(&[ids, mask])?;
        let embedding = embedding(outputs, rows).map_err(ItemError::internal)?;
        Ok(Prediction::new(vec![
            embedding,
            Tensor::from_i64("tokens", &[rows as u64, 1], &tokens),
        ]))
    }
}

/// The graph's output `embedding` (or its only output, renamed), checked to be
/// `FP32 [rows, D]`.
fn embedding(outputs: Vec<Tensor>, rows: usize) -> Result<Tensor, String> {
    let names = || outputs.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", ");
    let found = match outputs.iter().position(|t| t.name == "embedding") {
        Some(i) => Some(i),
        None if outputs.len() == 1 => Some(0),
        None => None,
    };
    let Some(i) = found else {
        return Err(format!("the graph has no output 'embedding' (it has: {})", names()));
    };
    let Some(mut output) = outputs.into_iter().nth(i) else {
        return Err("the graph's output vanished".into());
    };
    let graph_name = std::mem::replace(&mut output.name, "embedding".into());
    let right_shape = output.shape.len() == 2 && output.shape.first() == Some(&(rows as u64));
    if output.datatype != Datatype::Fp32 || !right_shape {
        return Err(format!(
            "the graph's output '{graph_name}' is {} {}, expected FP32 [{rows}, D]",
            output.datatype,
            format_shape(&output.shape)
        ));
    }
    Ok(output)
}

/// Each row's sum of a row-major `[rows, len / rows]` matrix.
fn row_sums(values: &[i64], rows: usize) -> Vec<i64> {
    if rows == 0 {
        return Vec::new();
    }
    let columns = values.len() / rows;
    if columns == 0 {
        return vec![0; rows];
    }
    values.chunks_exact(columns).map(|row| row.iter().sum()).collect()
}

export_predictor!(Embed);

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn row_sums_count_each_rows_mask() {
        assert_eq!(row_sums(&[1, 1, 1, 1, 1, 0, 1, 0, 0], 3), [3, 2, 1]);
        assert_eq!(row_sums(&[], 2), [0, 0]);
        assert!(row_sums(&[], 0).is_empty());
    }

    #[test]
    fn the_embedding_is_found_renamed_and_checked() {
        let e = Tensor::from_f32("sentence_embedding", &[2, 3], &[0.0; 6]);
        let found = embedding(vec![e.clone()], 2).unwrap();
        assert_eq!(
            (found.name.as_str(), found.shape.as_slice()),
            ("embedding", &[2, 3][..])
        );
        let other = Tensor::from_f32("token_embeddings", &[2, 4, 3], &[0.0; 24]);
        let named = e.renamed("embedding");
        assert_eq!(embedding(vec![other.clone(), named], 2).unwrap().shape, [2, 3]);
        assert_eq!(
            embedding(vec![other.clone(), e], 2).unwrap_err(),
            "the graph has no output 'embedding' (it has: token_embeddings, sentence_embedding)"
        );
        assert_eq!(
            embedding(vec![other], 2).unwrap_err(),
            "the graph's output 'token_embeddings' is FP32 [2, 4, 3], expected FP32 [2, D]"
        );
    }
}
