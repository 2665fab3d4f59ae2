//! The vocabulary every layer shares: tensors and items ([`tensor`]), what becomes of an
//! item ([`outcome`]), a model's `model.toml` ([`config`]), ragged batches' padding ([`padding`]), the request parameters plugins read ([`request_parameters`]), the OpenAI routes a model is on ([`openai`]), how a model folder's files are
//! read ([`files`]), the kinds of stage ([`StageKind`]), how outside text is quoted
//! ([`text`]) and written into OpenMetrics label values ([`openmetrics`]). Depends on
//! nothing else in the crate.

pub mod config;
pub mod files;
pub mod openai;
pub mod openmetrics;
pub mod outcome;
pub mod padding;
pub mod request_parameters;
mod stage;
pub mod tensor;
pub mod text;

pub use stage::StageKind;
