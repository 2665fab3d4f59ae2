//! The vocabulary every layer shares: tensors and items ([`tensor`]), what becomes of an
//! item ([`outcome`]), a model's `model.toml` ([`config`]) and the kinds of stage
//! ([`StageKind`]). Depends on nothing else in the crate.

pub mod config;
pub mod outcome;
mod stage;
pub mod tensor;

pub use stage::StageKind;
