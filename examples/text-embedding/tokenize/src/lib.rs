//! The `minilm` model's preprocess stage: one text per item to the word-piece ids a
//! BERT-family encoder takes, with Hugging Face's `tokenizers` (the library
//! sentence-transformers tokenizes with) and the model's own `tokenizer.json`.
//!
//! Per item:
//!
//! - in: `text: BYTES []`, UTF-8; optionally `truncate: BOOL []`, which the host adds from
//!   the request parameter of that name (absent means true);
//! - out: `input_ids: INT64 [L]` (`[CLS] ... [SEP]`) and `attention_mask: INT64 [L]`
//!   (all ones), `L <= max_tokens`. Items have different `L`s: the model pads them per
//!   batch (`[batching] pad`), and predict counts the ones of the mask.
//!
//! Failures: text that is not UTF-8 is a 400 naming the offset of the first bad byte;
//! with `truncate` false, a text of more than `max_tokens` tokens is a 422 giving its
//! length (`text is 300 tokens long, more than this model's max_tokens (256); ...`, or
//! `at least` a count when counting stopped, past 64 times `max_tokens`); a tokenizer
//! failure is a 500 with the library's message. `""` is valid (`[CLS] [SEP]`).
//!
//! Cost (all-MiniLM-L6-v2's tokenizer.json): `init` parses the file in ~30 ms and leaves
//! ~8 MiB of linear memory; a sentence takes tens of microseconds, and a long text about
//! the same as its first `max_tokens` tokens (see `text.rs`).
//!
//! Parameters (`[parameters]` of model.toml), read at init:
//!
//! - `tokenizer`: the tokenizer file, inside the model folder (default `tokenizer.json`);
//!   its own truncation and padding settings are replaced;
//! - `max_tokens`: tokens per text at most, `[CLS]` and `[SEP]` included (default 256,
//!   sentence-transformers' `max_seq_length` for all-MiniLM-L6-v2). Longer texts are cut
//!   from the right, as sentence-transformers cuts them.

mod text;

use tensorplug_guest::prelude::*;
use text::{EncodeError, TextEncoder};

struct Tokenize {
    encoder: TextEncoder,
}

impl Preprocessor for Tokenize {
    fn init(parameters: Parameters) -> Result<Self, String> {
        let file: String = parameters.parse_or("tokenizer", "tokenizer.json".to_string())?;
        if file.is_empty() {
            return Err("parameter 'tokenizer': empty; name a file in the model folder".into());
        }
        let max_tokens: usize = parameters.parse_or("max_tokens", text::DEFAULT_MAX_TOKENS)?;
        let json = read_model_file(&file)?;
        let tokenizer = text::parse(&json).map_err(|e| format!("{file}: {e}"))?;
        drop(json);
        let encoder = TextEncoder::new(tokenizer, max_tokens)?;
        log::info(&format!(
            "{file}: max_tokens {max_tokens}, long texts tokenized {}; linear memory after init: {:.1} MiB",
            if encoder.cuts_texts() { "in pieces" } else { "whole" },
            linear_memory_mib()
        ));
        Ok(Tokenize { encoder })
    }

    fn preprocess(&mut self, items: Vec<Item>) -> Vec<Result<Item, ItemError>> {
        items.iter().map(|item| self.tokenize(item)).collect()
    }
}

impl Tokenize {
    fn tokenize(&mut self, item: &Item) -> Result<Item, ItemError> {
        let text = item.input("text")?;
        text.expect_shape(&[])?;
        let bytes = text
            .bytes_elements()?
            .next()
            .ok_or_else(|| text.error("expected one BYTES element"))?;
        let text = text::utf8(bytes).map_err(ItemError::bad_request)?;
        let truncate = match item.find("truncate") {
            Some(flag) => scalar_bool(flag)?,
            None => true,
        };
        let ids = self.encoder.encode(text, truncate).map_err(|e| match e {
            EncodeError::TooLong { .. } => ItemError::unprocessable(e.to_string()),
            EncodeError::Tokenizer(_) => ItemError::internal(e.to_string()),
        })?;
        let ids: Vec<i64> = ids.into_iter().map(i64::from).collect();
        let shape = [ids.len() as u64];
        let mask = vec![1i64; ids.len()];
        Ok(vec![
            Tensor::from_i64("input_ids", &shape, &ids),
            Tensor::from_i64("attention_mask", &shape, &mask),
        ])
    }
}

/// The instance's linear memory, which the model's `memory_mib` caps (the vocabulary
/// and the parsed file take most of it), for the log.
fn linear_memory_mib() -> f64 {
    #[cfg(target_arch = "wasm32")]
    let pages = core::arch::wasm32::memory_size::<0>();
    #[cfg(not(target_arch = "wasm32"))]
    let pages = 0usize;
    (pages as f64) * 64.0 / 1024.0
}

/// A scalar BOOL (shape `[]`, or `[1]`).
fn scalar_bool(t: &Tensor) -> Result<bool, ItemError> {
    t.expect_any_shape(&[&[], &[1]])?;
    t.values::<bool>()?
        .first()
        .copied()
        .ok_or_else(|| t.error("expected one BOOL element"))
}

export_preprocessor!(Tokenize);
