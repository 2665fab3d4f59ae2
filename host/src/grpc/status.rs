//! The one mapping from statuses to gRPC status codes (the gRPC edge's counterpart of the
//! REST edge answering a status as it is): request-level [`ServeError`]s and item-level
//! [`ItemError`]s by their protocol-neutral (HTTP-style) status, the answer to a
//! multi-item request whose items partly failed, and the codes' names.
//!
//! The table itself (both directions) is [`crate::protocol::grpc::code_for`]'s, in the wire
//! format's module, where the CLI's gRPC transport reads it backwards.
//!
//! A multi-item request with failed items (REST's 207) answers the code of its worst
//! failed item (the highest HTTP-style status among them), a message that counts the
//! failures and quotes the first, and every item's status in the
//! [`ITEM_STATUS_TRAILER`] trailer.

use tonic::metadata::MetadataValue;
use tonic::{Code, Status};

use crate::api::ServeError;
use crate::model::outcome::{ItemError, ItemOutcome};
use crate::serving::EdgeLabel;

// What the edge writes in the trailer of a failed answer (one item, or a multi-item
// request whose items partly failed): a JSON array over the items in request order,
// `{"status": 200}` or `{"status": 400, "error": "..."}`. Always present on such an answer
// and always a valid header value: only visible ASCII and spaces (every other character,
// control characters and DEL included, is a `\u` escape, so the value stays JSON), at most
// `TRAILER_BYTES`. When the entries with their messages do not fit, they go without
// messages and runs of equal statuses are merged (`{"status": 200, "count": 120}`); when
// even those do not fit, a last entry `{"status": <worst>, "count": <the rest>,
// "unreported": true}` covers the items left out.
pub use crate::protocol::grpc::{code_for, ITEM_STATUS_TRAILER};

/// Bytes of one item's error message kept in the trailer (before escaping; a character
/// escaped takes up to 12 bytes).
const TRAILER_MESSAGE_BYTES: usize = 200;
/// Bytes of the status message (`grpc-message`, which tonic percent-encodes: up to 3
/// bytes per byte). Together with [`TRAILER_BYTES`] the trailers stay well within the
/// 8 KiB of metadata that gRPC clients (grpc-core, so `tritonclient.grpc`) accept by
/// default.
const MESSAGE_BYTES: usize = 512;
/// Bytes of the whole trailer value.
pub const TRAILER_BYTES: usize = 3 * 1024;

/// The gRPC status of a request-level error.
pub fn status_of(error: &ServeError) -> Status {
    status(code_for(error.status()), &error.to_string())
}

/// A status whose message is clipped to [`MESSAGE_BYTES`]: whatever a message quotes, it
/// fits the header block a client accepts.
pub fn status(code: Code, message: &str) -> Status {
    Status::new(code, clip_bytes(message, MESSAGE_BYTES))
}

/// What the edge itself refuses, beside the service's errors.
#[derive(Debug, thiserror::Error)]
pub enum EdgeError {
    /// A request message's bytes did not all arrive within the body read timeout (REST's
    /// 408).
    #[error("a request message did not arrive within the body read timeout (body_read_timeout_ms = {limit_ms})")]
    MessageReadTimeout { limit_ms: u128 },
    /// A request's metadata (its HTTP/2 header list) is over the edge's limit.
    #[error(
        "the request's metadata is {bytes} bytes, over the limit of {limit} bytes (counted as HTTP/2 \
         counts a header list: each entry's name and value plus 32 bytes)"
    )]
    MetadataTooLarge { bytes: usize, limit: usize },
    /// An answer was left unread by its client for the idle timeout.
    #[error("the answer was left unread for the idle timeout (idle_timeout_ms = {limit_ms})")]
    AnswerUnread { limit_ms: u128 },
    /// A message refused by the decode-cost check.
    #[error("request refused before decoding: {0}")]
    Budget(#[from] super::budget::BudgetError),
    /// A message that is not valid protobuf.
    #[error("{0}")]
    Malformed(#[from] prost::DecodeError),
}

/// The gRPC status of an edge refusal.
pub fn edge_status(error: &EdgeError) -> Status {
    let code = match error {
        EdgeError::MessageReadTimeout { .. } | EdgeError::AnswerUnread { .. } => code_for(408),
        EdgeError::Budget(_) | EdgeError::Malformed(_) => Code::InvalidArgument,
        EdgeError::MetadataTooLarge { .. } => Code::ResourceExhausted,
    };
    status(code, &error.to_string())
}

/// tonic's (and prost's) own messages for a client's malformed message or framing, which
/// they answer `INTERNAL`; the gRPC spec asks `INTERNAL` only for a compressed flag
/// without a `grpc-encoding` (kept), so the rest are the client's mistake:
/// `INVALID_ARGUMENT`.
const CLIENT_FAULTS: [&str; 4] = [
    "failed to decode Protobuf message",
    "Unexpected EOF decoding stream",
    "Missing request message",
    "protocol error: received message with invalid compression flag",
];

/// Whether a status answers a client's malformed message or framing, and if so the code
/// it must have: `INVALID_ARGUMENT` for what tonic calls `INTERNAL` (see
/// [`CLIENT_FAULTS`]) and for the inference codec's own refusals (already so).
pub fn malformed(code: Code, message: &str) -> Option<Code> {
    let faults: &[&str] = match code {
        Code::Internal => &CLIENT_FAULTS,
        Code::InvalidArgument => &["failed to decode Protobuf message", "request refused before decoding"],
        _ => return None,
    };
    faults
        .iter()
        .any(|fault| message.starts_with(fault))
        .then_some(Code::InvalidArgument)
}

/// The gRPC status of a single-item request's failure.
pub fn item_status(error: &ItemError) -> Status {
    let mut status = status(code_for(error.status), &error.message);
    // The exact HTTP-style status (422 and 400 share a code), as for multi-item answers.
    insert_trailer(&mut status, item_status_json(&[Err(error.clone())]));
    status
}

/// The status a multi-item request whose items partly (or all) failed is answered with:
/// its worst failed item's (500 if, against its name, none failed).
pub fn worst_status(outcomes: &[ItemOutcome]) -> u16 {
    outcomes
        .iter()
        .filter_map(|o| o.as_ref().err().map(|e| e.status))
        .max()
        .unwrap_or(500)
}

/// The gRPC status of a multi-item request whose items partly (or all) failed.
pub fn multi_status(outcomes: &[ItemOutcome]) -> Status {
    let failures: Vec<(usize, &ItemError)> = outcomes
        .iter()
        .enumerate()
        .filter_map(|(i, o)| o.as_ref().err().map(|e| (i, e)))
        .collect();
    let worst = worst_status(outcomes);
    let mut message = format!(
        "{} of {} items failed; each item's status is in the {ITEM_STATUS_TRAILER} trailer",
        failures.len(),
        outcomes.len()
    );
    if let Some((index, error)) = failures.first() {
        let first = clip_bytes(&error.message, MESSAGE_BYTES);
        message.push_str(&format!("; item {index} ({}): {first}", error.status));
    }
    let mut status = status(code_for(worst), &message);
    insert_trailer(&mut status, item_status_json(outcomes));
    status
}

/// The gRPC status codes' names, by number (as the gRPC specification spells them).
const CODE_NAMES: [&str; 17] = [
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];

/// A gRPC status code's name ("OK", "INVALID_ARGUMENT", ...).
pub fn code_name(code: Code) -> &'static str {
    usize::try_from(code as i32)
        .ok()
        .and_then(|i| CODE_NAMES.get(i))
        .copied()
        .unwrap_or("UNKNOWN")
}

/// The gRPC edge's requests, counted by protocol-neutral status and named by the code
/// each was answered with.
pub static GRPC_EDGE: EdgeLabel = EdgeLabel {
    name: "grpc",
    status_name: Some(|status| code_name(code_for(status))),
};

fn insert_trailer(status: &mut Status, json: String) {
    // Visible ASCII by construction, so this cannot fail; were it ever to, the trailer
    // would still be there, saying so.
    let value = MetadataValue::try_from(json)
        .unwrap_or_else(|_| MetadataValue::from_static(r#"[{"status":500,"error":"unencodable item status"}]"#));
    status.metadata_mut().insert(ITEM_STATUS_TRAILER, value);
}

/// The trailer's JSON array, visible ASCII only, within [`TRAILER_BYTES`].
fn item_status_json(outcomes: &[ItemOutcome]) -> String {
    let status_of = |o: &ItemOutcome| o.as_ref().map_or_else(|e| e.status, |_| 200);
    let full: Vec<serde_json::Value> = outcomes
        .iter()
        .map(|o| match o {
            Ok(_) => serde_json::json!({"status": 200}),
            Err(e) => serde_json::json!({"status": e.status, "error": clip_bytes(&e.message, TRAILER_MESSAGE_BYTES)}),
        })
        .collect();
    let full = header_json(&serde_json::Value::Array(full));
    if full.len() <= TRAILER_BYTES {
        return full;
    }
    // Runs of equal statuses, without messages.
    let mut runs: Vec<(u16, usize)> = Vec::new();
    for outcome in outcomes {
        let status = status_of(outcome);
        match runs.last_mut() {
            Some((last, count)) if *last == status => *count += 1,
            _ => runs.push((status, 1)),
        }
    }
    let worst = outcomes.iter().map(status_of).max().unwrap_or(500);
    // Room for the closing entry of unreported items, whatever its numbers.
    let closing_room = r#",{"status":599,"count":18446744073709551615,"unreported":true}]"#.len();
    let mut out = String::from("[");
    let mut covered = 0usize;
    for (status, count) in runs {
        let entry = if count == 1 {
            format!(r#"{{"status":{status}}}"#)
        } else {
            format!(r#"{{"status":{status},"count":{count}}}"#)
        };
        if out.len() + 1 + entry.len() + closing_room > TRAILER_BYTES {
            break;
        }
        if covered > 0 {
            out.push(',');
        }
        out.push_str(&entry);
        covered += count;
    }
    let rest = outcomes.len() - covered;
    if rest > 0 {
        if covered > 0 {
            out.push(',');
        }
        out.push_str(&format!(r#"{{"status":{worst},"count":{rest},"unreported":true}}"#));
    }
    out.push(']');
    out
}

/// `text` cut to at most `limit` bytes (on a character boundary), marked with `...`.
fn clip_bytes(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_owned();
    }
    format!("{}...", crate::model::text::cut_to_bytes(text, limit))
}

/// JSON text as a header value may carry it: every character outside visible ASCII and
/// space (control characters, DEL, non-ASCII) as a `\uXXXX` escape (surrogate pairs beyond
/// the BMP). serde_json already escapes control characters inside strings; DEL and
/// non-ASCII it leaves raw.
fn header_json(value: &serde_json::Value) -> String {
    let text = value.to_string();
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if (' '..='~').contains(&c) {
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
    fn every_status_has_a_code() {
        let table = [
            (200, Code::Ok),
            (400, Code::InvalidArgument),
            (401, Code::Unauthenticated),
            (403, Code::PermissionDenied),
            (404, Code::NotFound),
            (408, Code::DeadlineExceeded),
            (413, Code::ResourceExhausted),
            (415, Code::InvalidArgument),
            (422, Code::InvalidArgument),
            (429, Code::ResourceExhausted),
            (500, Code::Internal),
            (501, Code::Unimplemented),
            (503, Code::Unavailable),
            (504, Code::DeadlineExceeded),
            (599, Code::Internal),
        ];
        for (status, code) in table {
            assert_eq!(code_for(status), code, "{status}");
        }
    }

    /// Every request failure answers the code it answered before statuses were
    /// protocol-neutral.
    #[test]
    fn request_failures_keep_their_codes() {
        use crate::serving::{RepositoryError, SubmitError};
        let cases = [
            (ServeError::Unreadable("x".into()), Code::InvalidArgument),
            (ServeError::ModelNotFound("m".into()), Code::NotFound),
            (ServeError::ModelNotReady("m".into()), Code::Unavailable),
            (
                ServeError::Queue(SubmitError::Closed { model: "m".into() }),
                Code::Unavailable,
            ),
            (ServeError::Internal("x".into()), Code::Internal),
            (ServeError::Unauthorized, Code::Unauthenticated),
            (ServeError::Forbidden("x".into()), Code::PermissionDenied),
            (
                ServeError::Repository(RepositoryError::InvalidName("x".into())),
                Code::InvalidArgument,
            ),
            (
                ServeError::Repository(RepositoryError::NotLoaded("x".into())),
                Code::NotFound,
            ),
        ];
        for (error, code) in cases {
            assert_eq!(status_of(&error).code(), code, "{error:?}");
        }
    }

    #[test]
    fn statuses_are_named_by_their_code() {
        let name = GRPC_EDGE.status_name.unwrap();
        assert_eq!(
            (name(200), name(422), name(415), name(503)),
            ("OK", "INVALID_ARGUMENT", "INVALID_ARGUMENT", "UNAVAILABLE")
        );
        assert_eq!(code_name(Code::Unauthenticated), "UNAUTHENTICATED");
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
            trailer.len() <= TRAILER_BYTES && trailer == r#"[{"status":400,"count":100}]"#,
            "{trailer}"
        );
    }

    /// Every message, however hostile, leaves a trailer that is a valid header value,
    /// parses as JSON and fits the client's metadata budget together with the message.
    #[test]
    fn hostile_messages_always_leave_a_valid_trailer() {
        let mut hostile: Vec<String> = vec![
            "\u{7f}del".into(),
            "line\r\nX-Injected: 1".into(),
            "nul\0byte".into(),
            "\u{1}\u{8}\t\u{1b}[31m".into(),
            "é漢字🦀".repeat(1000),
            "\u{7f}".repeat(10 << 20),
            "x".repeat(10 << 20),
            String::new(),
        ];
        hostile.push((0u8..=127).map(char::from).collect());
        for message in &hostile {
            // Many items share a shorter message (100,000 copies of 10 MiB would not fit).
            let shared = clip_bytes(message, 64 * 1024);
            for outcomes in [
                vec![Err(ItemError::new(422, message.clone()))],
                (0..300)
                    .map(|i| {
                        if i % 2 == 0 {
                            Ok(Vec::new())
                        } else {
                            Err(ItemError::new(400 + i % 100, shared.clone()))
                        }
                    })
                    .collect::<Vec<ItemOutcome>>(),
                (0..100_000).map(|_| Err(ItemError::new(400, "x"))).collect(),
            ] {
                let status = if outcomes.len() == 1 {
                    item_status(outcomes[0].as_ref().unwrap_err())
                } else {
                    multi_status(&outcomes)
                };
                let value = status.metadata().get(ITEM_STATUS_TRAILER).expect("the trailer");
                let text = value.to_str().expect("visible ASCII");
                assert!(text.bytes().all(|b| b == b' ' || b.is_ascii_graphic()), "{text}");
                assert!(text.len() <= TRAILER_BYTES, "{} bytes", text.len());
                let items: Vec<serde_json::Value> = serde_json::from_str(text).expect("JSON");
                let counted: u64 = items.iter().map(|i| i["count"].as_u64().unwrap_or(1)).sum();
                assert_eq!(counted, outcomes.len() as u64, "{text}");
                assert!(status.message().len() <= MESSAGE_BYTES + 3);
                // The whole header block as tonic sends it stays within a client's 8 KiB.
                let mut headers = tonic::codegen::http::HeaderMap::new();
                status.add_header(&mut headers).expect("headers");
                let size: usize = headers.iter().map(|(k, v)| k.as_str().len() + v.len() + 32).sum();
                assert!(size <= 6 * 1024, "{size} bytes of trailers");
            }
        }
        let one = item_status(&ItemError::new(422, "a\u{7f}b\r\né"));
        let text = one.metadata().get(ITEM_STATUS_TRAILER).unwrap().to_str().unwrap();
        let items: serde_json::Value = serde_json::from_str(text).unwrap();
        assert_eq!(items[0]["error"], "a\u{7f}b\r\né");
        assert_eq!(items[0]["status"], 422);
    }
}
