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
//! Each stage is a trait implemented by the plugin's own state type. `init` is called
//! once per plugin instance with the model's `[parameters]` (see [`Parameters`]) and
//! returns that state; every later call gets it as `&mut self`. The export macro keeps one
//! value per instance (each instance is single-threaded and has its own memory, so there
//! is nothing to lock), answers a call that comes before a successful `init` with 500,
//! and refuses a second `init`. The model folder is readable at [`MODEL_DIR`] (see
//! [`read_model_file`]), e.g. for weights loaded at `init`. ONNX graphs named in the
//! model's `[graphs]` run natively in the host through `wasi:nn` (see [`nn`]).
//!
//! Failures are per item: return an [`ItemError`] (`ItemError::bad_request(..)` is 400,
//! `ItemError::new(422, ..)` any status) for one item, or list [`ItemFailure`]s in a
//! [`Prediction`]. Every check in this crate ([`Tensor::expect_shape`],
//! [`Tensor::to_f32`], [`TensorsExt::input`], ...) already returns a 400 `ItemError` that
//! names the tensor, so `?` is usually all a plugin needs. A panic traps the instance; the
//! host answers the items involved with 500 and replaces the instance (with a fresh
//! `init`).
//!
//! # A complete predictor
//!
//! `Cargo.toml`: a `cdylib` depending on `tensorplug-guest`:
//!
//! ```toml
//! [lib]
//! crate-type = ["cdylib"]
//!
//! [dependencies]
//! tensorplug-guest = { path = "../tensorplug/guest-sdk" }
//! ```
//!
//! Copy `guest-sdk/template/.cargo/config.toml` into the plugin crate, so that a plain
//! `cargo build --release` builds for `wasm32-wasip2` with `simd128` (fast numeric code),
//! and put `target/wasm32-wasip2/release/<crate>.wasm` in the model folder.
//!
//! ```no_run
//! use tensorplug_guest::prelude::*;
//!
//! /// `y = scale * x`; items whose `x` is not finite fail with 400.
//! struct Scaler {
//!     scale: f32,
//!     /// Batches seen by this instance, for the log.
//!     batches: u64,
//! }
//!
//! impl Predictor for Scaler {
//!     fn init(parameters: Parameters) -> Result<Self, String> {
//!         let scale = parameters.parse_or("scale", 2.0f32)?;
//!         log::info(&format!("scaling by {scale}"));
//!         Ok(Scaler { scale, batches: 0 })
//!     }
//!
//!     fn predict(&mut self, batch: Vec<Tensor>) -> Result<Prediction, ItemError> {
//!         self.batches += 1;
//!         let x = batch.input("x")?;
//!         x.expect_shape(&[-1, 1])?;
//!         log::debug(&format!("batch {} of {} items", self.batches, x.batch_size()?));
//!         let mut y = Vec::new();
//!         let mut failures = Vec::new();
//!         for (i, &v) in x.values::<f32>()?.iter().enumerate() {
//!             if !v.is_finite() {
//!                 failures.push(ItemError::bad_request(format!("x: {v} is not finite")).at(i as u32));
//!             }
//!             y.push(v * self.scale);
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
//! /// Flattens `image: FP32 [28, 28]` to `[784]`; needs no state.
//! struct Flatten;
//!
//! impl Preprocessor for Flatten {
//!     fn init(_: Parameters) -> Result<Self, String> {
//!         Ok(Flatten)
//!     }
//!
//!     fn preprocess(&mut self, items: Vec<Item>) -> Vec<Result<Item, ItemError>> {
//!         items
//!             .into_iter()
//!             .map(|item| {
//!                 let x = item.input("image")?;
//!                 x.expect_shape(&[28, 28])?;
//!                 Ok(vec![Tensor::from_f32("image", &[784], &x.values::<f32>()?)])
//!             })
//!             .collect()
//!     }
//! }
//!
//! export_preprocessor!(Flatten);
//! ```
//!
//! A plugin crate exports exactly one stage (one export macro, once, at the top level of
//! the crate); the macro takes the type's name or path.

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
mod export;
mod item;
pub mod log;
pub mod metadata;
pub mod metrics;
mod model;
pub mod nn;
mod params;
mod stage;
mod tensor;

pub use bindings::predictor::tensorplug::plugin::types::{
    Datatype, Item, ItemError, ItemFailure, Parameter, Prediction, Tensor,
};
pub use bytes::BytesElements;
pub use element::Element;
#[doc(hidden)]
pub use export::__export;
/// IEEE 754 binary16, the element type of FP16 tensors (from the `half` crate).
pub use half::f16;
pub use item::TensorsExt;
pub use model::{read_model_file, MODEL_DIR};
pub use params::Parameters;
pub use stage::{Postprocessor, Predictor, Preprocessor};
pub use tensor::format_shape;

/// Everything a plugin usually needs: `use tensorplug_guest::prelude::*;`.
pub mod prelude {
    pub use crate::{
        export_postprocessor, export_predictor, export_preprocessor, read_model_file, Datatype, Element, Item,
        ItemError, ItemFailure, Parameter, Parameters, Postprocessor, Prediction, Predictor, Preprocessor, Tensor,
        TensorsExt,
    };
    pub use crate::{log, metadata, metrics, nn};
}
