//! [`EncodedAnswer`]: what an inference is answered with on any edge that carries V2's
//! REST bodies (the REST edge, the queue edge): a status number, the body REST would
//! send, and the binary extension's JSON length. One encoder, so that the same request
//! gets byte for byte the same answer whichever of those edges it came through.

use std::time::Duration;

use super::call::Inferred;
use super::error::ServeError;
use crate::protocol::{encode_error, encode_multi_status, encode_response};
use crate::serving::items::Answer;

/// An answer as REST sends it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncodedAnswer {
    /// The protocol-neutral status (an HTTP status number).
    pub status: u16,
    pub body: Vec<u8>,
    /// Length of the JSON part when binary tensor data follows it (the
    /// `Inference-Header-Content-Length` header); None: the whole body is JSON.
    pub json_header_len: Option<usize>,
    /// How long the client should wait before a retry (a full queue, a loading model).
    pub retry_after: Option<Duration>,
}

impl EncodedAnswer {
    /// `{"error": message}` with `status`.
    pub fn error(status: u16, message: &str) -> Self {
        Self {
            status,
            body: encode_error(message),
            json_header_len: None,
            retry_after: None,
        }
    }

    /// The answer to a request that failed as a whole.
    pub fn failed(error: &ServeError) -> Self {
        Self {
            retry_after: error.retry_after(),
            ..Self::error(error.status(), &error.to_string())
        }
    }

    /// The answer to an inference.
    pub fn inferred(inferred: Inferred) -> Self {
        let Inferred {
            model,
            answer,
            id,
            options,
            ..
        } = inferred;
        let (name, version) = (model.config.name.as_str(), model.config.version.as_str());
        match answer {
            Answer::Success(outputs) => {
                let encoded = encode_response(name, version, id.as_deref(), &outputs, &options);
                Self {
                    status: 200,
                    body: encoded.body,
                    json_header_len: encoded.json_header_len,
                    retry_after: None,
                }
            }
            Answer::Failure(error) => Self::error(error.status, &error.message),
            Answer::MultiStatus(results) => Self {
                status: 207,
                body: encode_multi_status(name, version, id.as_deref(), &results),
                json_header_len: None,
                retry_after: None,
            },
        }
    }

    /// [`EncodedAnswer::inferred`], on the blocking pool when the answer is large: a large
    /// answer takes milliseconds to encode, which an async worker should not spend.
    pub async fn inferred_offloaded(inferred: Inferred) -> Result<Self, ServeError> {
        if inferred.output_bytes <= OFFLOAD_ENCODE_BYTES {
            return Ok(Self::inferred(inferred));
        }
        tokio::task::spawn_blocking(move || Self::inferred(inferred))
            .await
            .map_err(|e| ServeError::Internal(format!("encoding the answer failed: {e}")))
    }
}

/// Answers whose outputs hold more bytes than this are encoded on the blocking pool.
const OFFLOAD_ENCODE_BYTES: usize = 256 * 1024;
