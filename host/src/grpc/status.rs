//! The one mapping from errors to gRPC status codes (the gRPC edge's counterpart of the
//! REST edge's HTTP status mapping): request-level [`ServeError`]s, item-level
//! [`ItemError`]s by their HTTP-style status, and the answer to a multi-item request
//! whose items partly failed.
//!
//! | HTTP (REST) | gRPC |
//! | --- | --- |
//! | 400, 415, other 4xx | `INVALID_ARGUMENT` |
//! | 401 | `UNAUTHENTICATED` |
//! | 403 | `PERMISSION_DENIED` |
//! | 404 | `NOT_FOUND` |
//! | 408, 504 | `DEADLINE_EXCEEDED` |
//! | 413, 429 | `RESOURCE_EXHAUSTED` |
//! | 500, other 5xx | `INTERNAL` |
//! | 501 | `UNIMPLEMENTED` |
//! | 503 | `UNAVAILABLE` |
//!
//! A multi-item request with failed items (REST's 207) answers the code of its worst
//! failed item (the highest HTTP-style status among them), a message that counts the
//! failures and quotes the first, and every item's status in the
//! [`ITEM_STATUS_TRAILER`] trailer.

use tonic::metadata::MetadataValue;
use tonic::{Code, Status};

use crate::api::ServeError;
use crate::model::outcome::{ItemError, ItemOutcome};
use crate::serving::RepositoryError;

/// Trailer of a failed answer (one item, or a multi-item request whose items partly
/// failed): a JSON array, one entry per item in request order, `{"status": 200}` or `{"status": 400, "error": "..."}` (ASCII only:
/// other characters are `\u` escapes).
pub const ITEM_STATUS_TRAILER: &str = "tensorplug-item-status";

/// Bytes of one item's error message kept in the trailer (the status message quotes the
/// first failure whole); the trailer is a header block, which clients cap (often at 8 or
/// 16 KiB).
const TRAILER_MESSAGE_BYTES: usize = 200;
/// Bytes of the first failure's message quoted in the status message (a header too).
const MESSAGE_BYTES: usize = 1024;
/// Bytes of the whole trailer value; beyond it, items' messages are left out.
const TRAILER_BYTES: usize = 8 * 1024;

/// The gRPC code of a request-level error.
pub fn code_of(error: &ServeError) -> Code {
    match error {
        ServeError::Protocol(_)
        | ServeError::InvalidInput(_)
        | ServeError::Unreadable(_)
        | ServeError::UnsupportedMediaType(_) => Code::InvalidArgument,
        ServeError::ModelNotFound(_) | ServeError::VersionNotFound { .. } => Code::NotFound,
        ServeError::BodyTooLarge { .. } => Code::ResourceExhausted,
        ServeError::ModelNotReady(_) | ServeError::Queue(_) => Code::Unavailable,
        ServeError::Internal(_) => Code::Internal,
        ServeError::Unauthorized => Code::Unauthenticated,
        ServeError::Forbidden(_) => Code::PermissionDenied,
        ServeError::Repository(e) => match e {
            RepositoryError::InvalidName(_) => Code::InvalidArgument,
            RepositoryError::NoSuchFolder(_) | RepositoryError::NotLoaded(_) => Code::NotFound,
            RepositoryError::Load { .. } => Code::Internal,
        },
    }
}

/// The gRPC status of a request-level error.
pub fn status_of(error: &ServeError) -> Status {
    Status::new(code_of(error), error.to_string())
}

/// The gRPC code of an HTTP-style item status (always 400..=599 by construction).
pub fn item_code(status: u16) -> Code {
    match status {
        401 => Code::Unauthenticated,
        403 => Code::PermissionDenied,
        404 => Code::NotFound,
        408 | 504 => Code::DeadlineExceeded,
        413 | 429 => Code::ResourceExhausted,
        400..=499 => Code::InvalidArgument,
        501 => Code::Unimplemented,
        503 => Code::Unavailable,
        _ => Code::Internal,
    }
}

/// The gRPC status of a single-item request's failure.
pub fn item_status(error: &ItemError) -> Status {
    let mut status = Status::new(item_code(error.status), error.message.clone());
    // The exact HTTP-style status (422 and 400 share a code), as for multi-item answers.
    if let Ok(value) = MetadataValue::try_from(item_status_json(&[Err(error.clone())])) {
        status.metadata_mut().insert(ITEM_STATUS_TRAILER, value);
    }
    status
}

/// The gRPC status of a multi-item request whose items partly (or all) failed.
pub fn multi_status(outcomes: &[ItemOutcome]) -> Status {
    let failures: Vec<(usize, &ItemError)> = outcomes
        .iter()
        .enumerate()
        .filter_map(|(i, o)| o.as_ref().err().map(|e| (i, e)))
        .collect();
    let worst = failures.iter().map(|(_, e)| e.status).max().unwrap_or(500);
    let mut message = format!(
        "{} of {} items failed; each item's status is in the {ITEM_STATUS_TRAILER} trailer",
        failures.len(),
        outcomes.len()
    );
    if let Some((index, error)) = failures.first() {
        let first = clip_bytes(&error.message, MESSAGE_BYTES);
        message.push_str(&format!("; item {index} ({}): {first}", error.status));
    }
    let mut status = Status::new(item_code(worst), message);
    if let Ok(value) = MetadataValue::try_from(item_status_json(outcomes)) {
        status.metadata_mut().insert(ITEM_STATUS_TRAILER, value);
    }
    status
}

/// The trailer's JSON array, ASCII only, within [`TRAILER_BYTES`].
fn item_status_json(outcomes: &[ItemOutcome]) -> String {
    let entries = |with_messages: bool| {
        let items: Vec<serde_json::Value> = outcomes
            .iter()
            .map(|o| match o {
                Ok(_) => serde_json::json!({"status": 200}),
                Err(e) if with_messages => {
                    serde_json::json!({"status": e.status, "error": clip_bytes(&e.message, TRAILER_MESSAGE_BYTES)})
                }
                Err(e) => serde_json::json!({"status": e.status}),
            })
            .collect();
        ascii_json(&serde_json::Value::Array(items))
    };
    let full = entries(true);
    if full.len() <= TRAILER_BYTES {
        full
    } else {
        entries(false)
    }
}

/// `text` cut to at most `limit` bytes (on a character boundary), marked with `...`.
fn clip_bytes(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_owned();
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

/// JSON text with every non-ASCII character escaped (`\uXXXX`, surrogate pairs beyond
/// the BMP), as a metadata value needs.
fn ascii_json(value: &serde_json::Value) -> String {
    let text = value.to_string();
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_item_status_has_a_code() {
        assert_eq!(item_code(400), Code::InvalidArgument);
        assert_eq!(item_code(422), Code::InvalidArgument);
        assert_eq!(item_code(500), Code::Internal);
        assert_eq!(item_code(503), Code::Unavailable);
        assert_eq!(item_code(504), Code::DeadlineExceeded);
        assert_eq!(item_code(599), Code::Internal);
    }

    #[test]
    fn a_partial_failure_carries_every_items_status() {
        let outcomes: Vec<ItemOutcome> = vec![
            Ok(Vec::new()),
            Err(ItemError::new(400, "bad pixel é")),
            Err(ItemError::new(500, "trap")),
        ];
        let status = multi_status(&outcomes);
        assert_eq!(status.code(), Code::Internal);
        assert!(
            status.message().starts_with("2 of 3 items failed") && status.message().contains("item 1 (400): bad pixel"),
            "{}",
            status.message()
        );
        let trailer = status.metadata().get(ITEM_STATUS_TRAILER).unwrap().to_str().unwrap();
        let items: serde_json::Value = serde_json::from_str(trailer).unwrap();
        assert_eq!(items[0]["status"], 200);
        assert_eq!(items[1]["error"], "bad pixel é");
        assert_eq!(items[2]["status"], 500);
        let many: Vec<ItemOutcome> = (0..100).map(|_| Err(ItemError::new(400, "x".repeat(4096)))).collect();
        let status = multi_status(&many);
        let trailer = status.metadata().get(ITEM_STATUS_TRAILER).unwrap().to_str().unwrap();
        assert!(
            trailer.len() <= TRAILER_BYTES && trailer.starts_with("[{\"status\":400}"),
            "{trailer}"
        );
    }
}
