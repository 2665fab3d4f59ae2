//! Write tensorplug model plugins in Rust.
//!
//! A tensorplug model is a pipeline of up to three WebAssembly components, each built
//! from its own crate against this SDK:
//!
//! | stage | implement | export with | sees |
//! | --- | --- | --- | --- |
//! | preprocess | [`Preprocessor`] | [`export_preprocessor!`] | one [`Item`] per client example |
//! | predict | [`Predictor`] | [`export_predictor!`] | one batch: each input stacked along a new leading dimension N |
//! | postprocess | [`Postprocessor`] | [`export_postprocessor!`] | one [`Item`] per example, split from predict's outputs |
//!
//! Every stage also has `init`, called once per instance with the model's
//! `[parameters]` (see [`Parameters`]); the model folder is readable at [`MODEL_DIR`]
//! (see [`read_model_file`]). Trait methods take no `self`: keep what `init` computes in
//! a `static` such as [`std::sync::OnceLock`] (each instance is single-threaded and has
//! its own memory).
//!
//! Failures are per item: return an [`ItemError`] (`ItemError::bad_request(..)` is 400,
//! `ItemError::new(422, ..)` any status) for one item, or list [`ItemFailure`]s in a
//! [`Prediction`]. Every check in this crate ([`Tensor::expect_shape`],
//! [`Tensor::to_f32`], [`TensorsExt::input`], ...) already returns a 400 `ItemError` that
//! names the tensor, so `?` is usually all a plugin needs. A panic traps the instance; the
//! host answers the items involved with 500 and replaces the instance.
//!
//! # A complete predictor
//!
//! `Cargo.toml`: a `cdylib` depending on `tensorplug-guest`. Build it with
//! `cargo build --release --target wasm32-wasip2` (add
//! `-C target-feature=+simd128` to `RUSTFLAGS` for fast numeric code) and put the
//! `.wasm` in the model folder.
//!
//! ```no_run
//! use std::sync::OnceLock;
//!
//! use tensorplug_guest::prelude::*;
//!
//! /// Set once by `init` from the `scale` parameter.
//! static SCALE: OnceLock<f32> = OnceLock::new();
//!
//! struct Scaler;
//!
//! impl Predictor for Scaler {
//!     fn init(parameters: Vec<Parameter>) -> Result<(), String> {
//!         let scale = Parameters::new(parameters).parse_or("scale", 2.0f32)?;
//!         log::info(&format!("scaling by {scale}"));
//!         SCALE.set(scale).map_err(|_| "init called twice".to_string())
//!     }
//!
//!     fn predict(batch: Vec<Tensor>) -> Result<Prediction, ItemError> {
//!         let x = batch.input("x")?;
//!         x.expect_shape(&[-1, 1])?;
//!         let scale = SCALE.get().copied().unwrap_or(2.0);
//!         let mut y = Vec::new();
//!         let mut failures = Vec::new();
//!         for (i, &v) in x.values::<f32>()?.iter().enumerate() {
//!             if !v.is_finite() {
//!                 failures.push(ItemError::bad_request(format!("x: {v} is not finite")).at(i as u32));
//!             }
//!             y.push(v * scale);
//!         }
//!         Ok(Prediction::with_failures(vec![Tensor::from_f32("y", &x.shape, &y)], failures))
//!     }
//! }
//!
//! export_predictor!(Scaler);
//! ```
//!
//! A preprocessor or postprocessor answers one result per item:
//!
//! ```no_run
//! use tensorplug_guest::prelude::*;
//!
//! struct Flatten;
//!
//! impl Preprocessor for Flatten {
//!     fn init(_: Vec<Parameter>) -> Result<(), String> {
//!         Ok(())
//!     }
//!
//!     fn preprocess(items: Vec<Item>) -> Vec<Result<Item, ItemError>> {
//!         items.into_iter().map(|item| {
//!             let x = item.input("image")?;
//!             x.expect_shape(&[28, 28])?;
//!             Ok(vec![Tensor::from_f32("image", &[784], &x.values::<f32>()?)])
//!         }).collect()
//!     }
//! }
//!
//! export_preprocessor!(Flatten);
//! ```
//!
//! The export macros expand to paths through `tensorplug_guest`, so depend on the SDK
//! under that name, and pass them a type name (not a path).

#![deny(missing_docs)]

#[cfg(not(target_endian = "little"))]
compile_error!("tensorplug-guest supports little-endian targets only (wasm32, x86_64, aarch64)");

// The generated export macros name this crate by its own name, also from inside it.
extern crate self as tensorplug_guest;

#[doc(hidden)]
pub use wit_bindgen as __wit_bindgen;

#[allow(missing_docs)]
pub mod bindings;
mod bytes;
mod datatype;
mod element;
mod error;
mod item;
pub mod log;
mod model;
mod params;
mod tensor;

pub use bindings::postprocessor::export_postprocessor;
pub use bindings::postprocessor::Guest as Postprocessor;
pub use bindings::predictor::export_predictor;
pub use bindings::predictor::tensorplug::plugin::types::{
    Datatype, Item, ItemError, ItemFailure, Parameter, Prediction, Tensor,
};
pub use bindings::predictor::Guest as Predictor;
pub use bindings::preprocessor::export_preprocessor;
pub use bindings::preprocessor::Guest as Preprocessor;
pub use bytes::BytesElements;
pub use element::Element;
/// IEEE 754 binary16, the element type of FP16 tensors (from the `half` crate).
pub use half::f16;
pub use item::TensorsExt;
pub use model::{read_model_file, MODEL_DIR};
pub use params::Parameters;
pub use tensor::format_shape;

/// Everything a plugin usually needs: `use tensorplug_guest::prelude::*;`.
pub mod prelude {
    pub use crate::log;
    pub use crate::{
        export_postprocessor, export_predictor, export_preprocessor, read_model_file, Datatype, Element, Item,
        ItemError, ItemFailure, Parameter, Parameters, Postprocessor, Prediction, Predictor, Preprocessor, Tensor,
        TensorsExt,
    };
}
