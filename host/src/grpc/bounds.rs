//! What the gRPC edge's layer ([`super::edge`]) and the bodies it wraps
//! ([`super::read_deadline`], [`super::paced`]) share: the bounds they apply, and the
//! rewriting of a client's malformed message in an answer's final headers (whichever of
//! them carries the final status). A leaf: it names none of the three, so they import it
//! and not each other.

use std::time::Duration;

use tonic::codegen::http::HeaderMap;
use tonic::{Code, Status};

use super::metrics::GrpcMetrics;
use super::reflection_check::{COMPRESSED, MALFORMED};
use super::status::{malformed, status};

/// The bounds the layer applies, shared by every call.
pub struct EdgeBounds {
    /// Longest time one request message may take to arrive (REST's body read timeout).
    pub message_read_timeout: Duration,
    /// Longest time an answer may be left unread (REST's idle timeout, as for its writes).
    pub answer_unread_timeout: Duration,
    /// None with `--metrics off`.
    pub metrics: Option<GrpcMetrics>,
}

/// Counts a client's malformed message or framing in `headers` (an answer's headers or
/// trailers), and rewrites the `INTERNAL` that tonic gave it (see [`malformed`]).
pub fn rewrite_client_fault(headers: &mut HeaderMap, metrics: Option<&GrpcMetrics>) {
    // The common case costs one lookup: no status here, or neither INTERNAL nor
    // INVALID_ARGUMENT.
    let code = headers.get("grpc-status").map(|v| v.as_bytes());
    if code != Some(&b"13"[..]) && code != Some(&b"3"[..]) {
        return;
    }
    let Some(answered) = Status::from_header_map(headers) else {
        return;
    };
    let Some(code) = malformed(answered.code(), answered.message()) else {
        return;
    };
    if let Some(metrics) = metrics {
        metrics.count_malformed();
    }
    if code != answered.code() {
        headers.remove("grpc-message");
        // Only fails for a message that cannot be a header, which `status` never gives.
        let _ = status(code, answered.message()).add_header(headers);
    }
}

/// Answers a reflection call whose request the check found wrong (which tonic-reflection
/// ends with `OK`) with what it found, in its final `headers`.
pub fn refuse_malformed(headers: &mut HeaderMap, found: u8, metrics: Option<&GrpcMetrics>) {
    if headers.get("grpc-status").map(|v| v.as_bytes()) != Some(&b"0"[..]) {
        return;
    }
    let refusal = match found {
        MALFORMED => {
            if let Some(metrics) = metrics {
                metrics.count_malformed();
            }
            status(
                Code::InvalidArgument,
                "failed to decode Protobuf message: a reflection request message is malformed",
            )
        }
        COMPRESSED => status(
            Code::Internal,
            "protocol error: received message with compressed-flag but no grpc-encoding was specified",
        ),
        _ => return,
    };
    headers.remove("grpc-message");
    let _ = refusal.add_header(headers);
}
