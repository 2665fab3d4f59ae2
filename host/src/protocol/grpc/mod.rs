//! The Open Inference Protocol's gRPC wire format (`inference.GRPCInferenceService`), for
//! every side that speaks it: the messages and the client generated from
//! `proto/grpc_service.proto` ([`proto`]), and the conversions between the messages and
//! the protocol's own types, both ways.
//!
//! - A server reads a request with [`read_request`] (into the same validated
//!   [`InferRequest`](super::InferRequest) the REST edge builds) and writes its answer
//!   with [`write_response`] and [`write_metadata`].
//! - A client writes a request with [`write_request`] (raw contents) or
//!   [`write_typed_request`], reads a response with [`read_response`] (into the REST
//!   client's [`ServerAnswer`](super::client::ServerAnswer)), and a failed call with
//!   [`answered_status`] and [`read_item_statuses`]; the server maps a status to its code
//!   with [`code_for`], the one table of the two.
//!
//! Typed contents become tensor bytes on one path, the protocol's validated one (the
//! caps, each value's range, the element count), whether they come in a request or in an
//! answer. What only a server does with the messages (the server stub, the checked codec,
//! errors → codes) is the gRPC edge's.
//!
//! Layout: `request` and `response` (the messages), `contents` (typed contents ↔ tensor
//! data), `parameters`, `metadata`, `failure` (a failed call, read), `error`.

mod contents;
mod error;
mod failure;
mod metadata;
mod parameters;
mod request;
mod response;

pub use error::MessageError;
pub use failure::{answered_status, code_for, read_item_statuses, ITEM_STATUS_TRAILER};
pub use metadata::write_metadata;
pub use request::{read_request, write_request, write_typed_request};
pub use response::{read_response, write_response};

/// The protocol's messages and its client (generated at build time from
/// `proto/grpc_service.proto`), and its encoded file descriptor set.
pub mod proto {
    #![allow(missing_docs, clippy::all, clippy::pedantic, unused_qualifications)]
    tonic::include_proto!("inference");

    /// `proto/grpc_service.proto` compiled: what a reflection service describes.
    pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/inference_descriptor.bin"));
}
