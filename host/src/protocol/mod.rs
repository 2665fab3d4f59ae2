//! The Open Inference Protocol (KServe V2) wire formats: REST request bodies in, response
//! bodies out, metadata bodies; and the gRPC messages ([`grpc`]). Pure data conversion —
//! no HTTP server types, no plugin runtime.
//!
//! - [`decode_request`]: JSON (or JSON + binary tensor data) → [`InferRequest`] of
//!   validated [`Tensor`](crate::model::tensor::Tensor)s, or a [`ProtocolError`] worded for the
//!   client (always HTTP 400).
//! - [`encode_response`], [`encode_multi_status`], [`encode_error`]: response bodies.
//! - [`InferRequest::from_parts`]: a request another wire format (gRPC) has taken apart
//!   → the same validated [`InferRequest`], under the same caps.
//! - [`ServerMetadata`], [`ModelMetadata`]: metadata bodies.
//! - [`client`]: the client's side, for `tensorplug infer`: request bodies out
//!   ([`client::encode_request`]), answer bodies in ([`client::decode_answer`]); and
//!   [`AnswerHead`], for answers that carry `parameters` and a status in their body.
//! - [`openai`]: OpenAI's embeddings requests, answers and error objects.
//! - [`grpc`]: the gRPC wire format: its messages (and client), and their conversions to
//!   and from the types above, for servers and clients alike.
//!
//! Layout: `client` (the client's side), `grpc` (the gRPC messages), `error` (the error
//! type), `limits` (caps on a request's contents), `parameters` (typed `parameters` objects), `parse` (streaming JSON structure), `data` (JSON
//! `data` → tensor bytes), `request` (validation, binary data), `tensor_json` (one output
//! as JSON), `response` (response bodies), `metadata`.

pub mod client;
mod data;
mod error;
pub mod grpc;
pub mod limits;
mod metadata;
pub mod nats;
pub mod openai;
mod parameters;
mod parse;
mod parts;
mod request;
mod response;
mod tensor_json;

pub use error::{clip, ProtocolError};
pub use metadata::{ModelMetadata, ServerMetadata, TensorMetadata};
pub use parameters::{ParameterValue, Parameters};
pub use parts::{InputData, InputParts, OutputParts, RequestParts};
pub use request::{decode_request, render_parameter, InferRequest, RequestedOutput};
pub use response::{
    encode_error, encode_error_with, encode_multi_status, encode_multi_status_with, encode_response,
    encode_response_with, AnswerHead, EncodedResponse, OutputOptions,
};
