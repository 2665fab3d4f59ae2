//! What every edge (REST, gRPC, the in-process transport of `tensorplug infer`) asks of
//! the server, independent of its wire format: find a model, run an inference request
//! through it ([`InferCall`]), read and change the repository under its access rules —
//! and [`ServeError`], the one error type, which knows its protocol-neutral status.

mod answer;
mod call;
mod decode;
pub mod error;
mod infer;
mod metadata;
pub mod repository;

pub use answer::EncodedAnswer;
pub use call::{InferCall, Inferred};
pub use decode::decode_body;
pub use error::ServeError;
pub use infer::{find, find_model, Found};
pub use metadata::{model_metadata, model_ready};
