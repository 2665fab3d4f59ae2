//! OpenAI's embeddings wire format (`POST /v1/embeddings`, `GET /v1/models`), as the
//! official clients speak it: the request decoded into texts, the answer and the error
//! object encoded. What a route does with them is the REST edge's (`http/openai.rs`).

use base64::Engine;
use serde::{Deserialize, Serialize};

/// Most texts one request may hold (OpenAI's own limit).
pub const MAX_INPUTS: usize = 2048;

/// A decoded embeddings request.
#[derive(Debug, PartialEq)]
pub struct EmbeddingsRequest {
    pub model: String,
    pub texts: Vec<String>,
    pub encoding: Encoding,
    /// The vector size the client asked for, if it did.
    pub dimensions: Option<u64>,
}

/// How vectors are written: JSON numbers, or base64 of their little-endian FP32 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    Float,
    Base64,
}

/// Why a request cannot be read: the message and the field it is about.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct BadRequest {
    pub message: String,
    pub param: Option<&'static str>,
}

fn bad(param: &'static str, message: impl Into<String>) -> BadRequest {
    BadRequest {
        message: message.into(),
        param: Some(param),
    }
}

#[derive(Deserialize)]
struct RawRequest {
    model: Option<String>,
    input: Option<serde_json::Value>,
    encoding_format: Option<String>,
    dimensions: Option<u64>,
}

/// Decodes a request body. Token arrays (lists of integers) are refused: the model's own
/// tokenizer reads text.
pub fn decode_embeddings(body: &[u8]) -> Result<EmbeddingsRequest, BadRequest> {
    let raw: RawRequest = serde_json::from_slice(body).map_err(|e| BadRequest {
        message: format!("the body is not a valid embeddings request: {e}"),
        param: None,
    })?;
    let model = raw
        .model
        .ok_or_else(|| bad("model", "you must provide a model parameter"))?;
    let texts = match raw.input {
        None => return Err(bad("input", "you must provide an input parameter")),
        Some(serde_json::Value::String(text)) => vec![text],
        Some(serde_json::Value::Array(items)) => {
            if items.is_empty() {
                return Err(bad("input", "input must not be an empty list"));
            }
            if items.len() > MAX_INPUTS {
                return Err(bad(
                    "input",
                    format!("input has {} texts; at most {MAX_INPUTS} per request", items.len()),
                ));
            }
            items
                .into_iter()
                .enumerate()
                .map(|(index, item)| match item {
                    serde_json::Value::String(text) => Ok(text),
                    serde_json::Value::Number(_) | serde_json::Value::Array(_) => Err(bad(
                        "input",
                        format!(
                            "input[{index}]: token arrays are not accepted; send the text (the model tokenizes it)"
                        ),
                    )),
                    _ => Err(bad("input", format!("input[{index}] is not a string"))),
                })
                .collect::<Result<Vec<String>, BadRequest>>()?
        }
        Some(_) => return Err(bad("input", "input must be a string or a list of strings")),
    };
    let encoding = match raw.encoding_format.as_deref() {
        None | Some("float") => Encoding::Float,
        Some("base64") => Encoding::Base64,
        Some(other) => {
            return Err(bad(
                "encoding_format",
                format!(
                    "encoding_format {:?} is not \"float\" or \"base64\"",
                    super::clip(other)
                ),
            ))
        }
    };
    Ok(EmbeddingsRequest {
        model,
        texts,
        encoding,
        dimensions: raw.dimensions,
    })
}

#[derive(Serialize)]
struct ListJson<T> {
    object: &'static str,
    data: Vec<T>,
}

#[derive(Serialize)]
struct EmbeddingsJson<'a> {
    object: &'static str,
    data: Vec<EmbeddingJson>,
    model: &'a str,
    usage: UsageJson,
}

#[derive(Serialize)]
struct EmbeddingJson {
    object: &'static str,
    index: usize,
    embedding: VectorJson,
}

#[derive(Serialize)]
#[serde(untagged)]
enum VectorJson {
    Float(Vec<f32>),
    Base64(String),
}

#[derive(Serialize)]
struct UsageJson {
    prompt_tokens: u64,
    total_tokens: u64,
}

/// The answer: `vectors` holds one row of `dimension` little-endian FP32 values per text.
pub fn encode_embeddings(
    model: &str,
    vectors: &[u8],
    dimension: usize,
    encoding: Encoding,
    prompt_tokens: u64,
) -> Vec<u8> {
    let row_bytes = dimension * 4;
    let data = if row_bytes == 0 {
        Vec::new()
    } else {
        vectors
            .chunks_exact(row_bytes)
            .enumerate()
            .map(|(index, row)| EmbeddingJson {
                object: "embedding",
                index,
                embedding: match encoding {
                    Encoding::Float => VectorJson::Float(
                        row.chunks_exact(4)
                            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                            .collect(),
                    ),
                    Encoding::Base64 => VectorJson::Base64(base64::engine::general_purpose::STANDARD.encode(row)),
                },
            })
            .collect()
    };
    super::response::to_json(&EmbeddingsJson {
        object: "list",
        data,
        model,
        usage: UsageJson {
            prompt_tokens,
            total_tokens: prompt_tokens,
        },
    })
}

#[derive(Serialize)]
struct ModelJson<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    owned_by: &'static str,
}

fn model_json(name: &str) -> ModelJson<'_> {
    ModelJson {
        id: name,
        object: "model",
        created: 0,
        owned_by: "tensorplug",
    }
}

/// `GET /v1/models`: the models served on OpenAI's routes.
pub fn encode_models(names: &[&str]) -> Vec<u8> {
    super::response::to_json(&ListJson {
        object: "list",
        data: names.iter().map(|name| model_json(name)).collect(),
    })
}

/// `GET /v1/models/{model}`.
pub fn encode_model(name: &str) -> Vec<u8> {
    super::response::to_json(&model_json(name))
}

#[derive(Serialize)]
struct ErrorJson<'a> {
    error: ErrorBody<'a>,
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    param: Option<&'a str>,
    code: Option<&'static str>,
}

/// OpenAI's error object for an HTTP `status`: the type its clients map that status to,
/// and a code for the two they test for (an unknown model, a time limit).
pub fn encode_error(status: u16, message: &str, param: Option<&str>) -> Vec<u8> {
    let (kind, code) = match status {
        404 => ("invalid_request_error", Some("model_not_found")),
        401 | 403 => ("authentication_error", None),
        429 => ("rate_limit_error", None),
        504 => ("timeout", Some("timeout")),
        400..=499 => ("invalid_request_error", None),
        _ => ("server_error", None),
    };
    super::response::to_json(&ErrorJson {
        error: ErrorBody {
            message,
            kind,
            param,
            code,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_take_a_string_or_a_list_of_strings() {
        let one = decode_embeddings(br#"{"model": "m", "input": "hello"}"#).unwrap();
        assert_eq!((one.texts, one.encoding), (vec!["hello".to_string()], Encoding::Float));
        let many =
            decode_embeddings(br#"{"model": "m", "input": ["a", ""], "encoding_format": "base64", "user": "u"}"#)
                .unwrap();
        assert_eq!((many.texts.len(), many.encoding), (2, Encoding::Base64));
        for (body, param, says) in [
            (r#"{"input": "a"}"#.to_string(), Some("model"), "model"),
            (r#"{"model": "m"}"#.to_string(), Some("input"), "input"),
            (r#"{"model": "m", "input": []}"#.to_string(), Some("input"), "empty"),
            (
                r#"{"model": "m", "input": [1, 2]}"#.to_string(),
                Some("input"),
                "input[0]: token arrays",
            ),
            (
                r#"{"model": "m", "input": ["a", null]}"#.to_string(),
                Some("input"),
                "input[1]",
            ),
            (
                r#"{"model": "m", "input": 5}"#.to_string(),
                Some("input"),
                "a string or a list",
            ),
            (
                r#"{"model": "m", "input": "a", "encoding_format": "int8"}"#.to_string(),
                Some("encoding_format"),
                "int8",
            ),
            (
                format!(r#"{{"model": "m", "input": [{}"a"]}}"#, "\"a\",".repeat(MAX_INPUTS)),
                Some("input"),
                "at most 2048",
            ),
            ("{".to_string(), None, "not a valid embeddings request"),
        ] {
            let err = decode_embeddings(body.as_bytes()).unwrap_err();
            assert_eq!(err.param, param, "{body}");
            assert!(err.message.contains(says), "{body}: {}", err.message);
        }
    }

    #[test]
    fn answers_write_vectors_as_floats_or_base64() {
        let vectors: Vec<u8> = [1.0f32, -0.5, 0.25, 2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        let floats: serde_json::Value =
            serde_json::from_slice(&encode_embeddings("m", &vectors, 2, Encoding::Float, 7)).unwrap();
        assert_eq!(floats["data"][1]["embedding"], serde_json::json!([0.25, 2.0]));
        assert_eq!(floats["data"][1]["index"], 1);
        assert_eq!(floats["usage"]["prompt_tokens"], 7);
        assert_eq!(floats["object"], "list");
        let packed: serde_json::Value =
            serde_json::from_slice(&encode_embeddings("m", &vectors, 2, Encoding::Base64, 7)).unwrap();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(packed["data"][0]["embedding"].as_str().unwrap())
            .unwrap();
        assert_eq!(bytes, vectors[..8]);
        let error: serde_json::Value = serde_json::from_slice(&encode_error(404, "no model x", None)).unwrap();
        assert_eq!(error["error"]["code"], "model_not_found");
        assert_eq!(error["error"]["type"], "invalid_request_error");
    }
}
