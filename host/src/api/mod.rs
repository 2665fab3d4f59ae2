//! What every edge (REST, and any other transport) asks of the server,
//! independent of its wire format: find a model, run an inference request through it,
//! read and change the repository under its access rules — and [`ServeError`], the one
//! error type every edge maps to its own status codes.

pub mod error;
mod infer;
mod metadata;
pub mod repository;

pub use error::ServeError;
pub use infer::{find_model, infer, Inference};
pub use metadata::{model_metadata, model_ready};
