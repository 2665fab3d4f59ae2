//! Decoding a V2 REST request body (JSON, or JSON and binary tensor data), whichever edge
//! carried it, off the async workers when it is large.

use bytes::Bytes;

use super::error::ServeError;
use crate::protocol::{decode_request, InferRequest};

/// Bodies larger than this are decoded on the blocking pool: a JSON body decodes at
/// roughly 100–300 MB/s, so this much takes a millisecond or two on an async worker,
/// which health checks and small requests can afford to wait; more they should not.
const OFFLOAD_DECODE_BYTES: usize = 256 * 1024;

/// Decodes `body`, whose first `json_header_len` bytes are JSON when binary tensor data
/// follows. The body is dropped as soon as it is decoded.
pub async fn decode_body(body: Bytes, json_header_len: Option<usize>) -> Result<InferRequest, ServeError> {
    if body.len() <= OFFLOAD_DECODE_BYTES {
        return Ok(decode_request(&body, json_header_len)?);
    }
    tokio::task::spawn_blocking(move || decode_request(&body, json_header_len))
        .await
        .map_err(|e| ServeError::Internal(format!("decoding the request failed: {e}")))?
        .map_err(ServeError::from)
}
