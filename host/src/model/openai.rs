//! Which of OpenAI's routes a model is served on (`[openai]` in `model.toml`), and the
//! tensors each route reads and writes. Only embeddings exist: texts in, one vector per
//! item out (`POST /v1/embeddings`).

use super::tensor::{DataType, TensorSpec};

/// `[openai.embeddings]`: the model answers OpenAI's embeddings route.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenAiEmbeddings {
    /// A BYTES input whose item is one text (per-item shape `[]`).
    pub input: String,
    /// An FP32 output whose item is one vector (per-item shape `[D]`).
    pub output: String,
    /// An INT64 output whose item counts the tokens the model read (`usage.prompt_tokens`).
    pub tokens: Option<String>,
}

/// `[openai]` as written.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOpenAi {
    embeddings: Option<RawEmbeddings>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEmbeddings {
    input: String,
    output: String,
    tokens: Option<String>,
}

/// Checks `[openai]` against the model's declared tensors; `batches` says whether the
/// model splits requests into items (the route sends one item per text).
pub fn parse(
    raw: Option<RawOpenAi>,
    (inputs, outputs): (&[TensorSpec], &[TensorSpec]),
    batches: bool,
) -> Result<Option<OpenAiEmbeddings>, String> {
    let Some(RawEmbeddings { input, output, tokens }) = raw.and_then(|r| r.embeddings) else {
        return Ok(None);
    };
    if !batches {
        return Err("key `openai.embeddings`: the model must batch (`[batching]`): each text is an item".into());
    }
    let find = |specs: &[TensorSpec], name: &str, key: &str, datatype: DataType, rank: usize| {
        let spec = specs
            .iter()
            .find(|s| s.name == name)
            .ok_or_else(|| format!("key `openai.embeddings.{key}`: the model declares no such tensor {name:?}"))?;
        if spec.datatype != datatype || !spec.shapes.iter().any(|s| s.len() == rank) {
            return Err(format!(
                "key `openai.embeddings.{key}`: {name:?} must be {datatype} with a per-item shape of rank {rank}"
            ));
        }
        Ok(())
    };
    find(inputs, &input, "input", DataType::Bytes, 0)?;
    find(outputs, &output, "output", DataType::Fp32, 1)?;
    if let Some(tokens) = &tokens {
        find(outputs, tokens, "tokens", DataType::Int64, 1)?;
    }
    Ok(Some(OpenAiEmbeddings { input, output, tokens }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, datatype: DataType, shape: Vec<i64>) -> TensorSpec {
        TensorSpec {
            name: name.into(),
            datatype,
            shapes: vec![shape],
        }
    }

    #[test]
    fn the_route_checks_the_tensors_it_reads() {
        let inputs = [spec("text", DataType::Bytes, vec![])];
        let outputs = [
            spec("embedding", DataType::Fp32, vec![384]),
            spec("tokens", DataType::Int64, vec![1]),
        ];
        let raw = |text: &str| -> Option<RawOpenAi> { Some(toml::from_str(text).unwrap()) };
        let ok = parse(
            raw("embeddings = { input = \"text\", output = \"embedding\", tokens = \"tokens\" }"),
            (&inputs, &outputs),
            true,
        )
        .unwrap()
        .unwrap();
        assert_eq!(ok.tokens.as_deref(), Some("tokens"));
        assert_eq!(parse(None, (&inputs, &outputs), true).unwrap(), None);
        for (text, batches, says) in [
            (
                "embeddings = { input = \"x\", output = \"embedding\" }",
                true,
                "no such tensor",
            ),
            (
                "embeddings = { input = \"text\", output = \"tokens\" }",
                true,
                "must be FP32",
            ),
            (
                "embeddings = { input = \"text\", output = \"embedding\" }",
                false,
                "must batch",
            ),
        ] {
            let err = parse(raw(text), (&inputs, &outputs), batches).unwrap_err();
            assert!(err.contains(says), "{text}: {err}");
        }
    }
}
