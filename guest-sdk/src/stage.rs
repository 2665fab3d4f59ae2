//! The three stage traits a plugin implements: [`Preprocessor`], [`Predictor`] and
//! [`Postprocessor`].
//!
//! Each is implemented by the plugin's own state type: `init` builds it from the model's
//! parameters, and every later call gets it as `&mut self`. The export macros
//! ([`export_predictor!`](crate::export_predictor) and friends) keep one value per plugin
//! instance.

use crate::{Item, ItemError, Parameters, Prediction, Tensor};

/// The predict stage: runs the model on a batch.
///
/// Implement it for the type that holds what the model needs (weights, settings, scratch
/// buffers) and export that type with [`export_predictor!`](crate::export_predictor). The
/// host calls [`init`](Predictor::init) once per plugin instance, before anything else;
/// the value it returns is kept for the life of the instance and handed to every
/// [`predict`](Predictor::predict) call as `&mut self`. Each instance is single-threaded
/// and has its own memory, so no locking is needed; the host runs several instances side
/// by side when the model asks for more than one.
///
/// ```no_run
/// use tensorplug_guest::prelude::*;
///
/// /// `y = scale * x`, with `scale` from the model's parameters.
/// struct Scaler {
///     scale: f32,
///     /// Reused across calls, so a batch allocates nothing but its output.
///     buffer: Vec<f32>,
/// }
///
/// impl Predictor for Scaler {
///     fn init(parameters: Parameters) -> Result<Self, String> {
///         let scale = parameters.parse_or("scale", 2.0f32)?;
///         Ok(Scaler { scale, buffer: Vec::new() })
///     }
///
///     fn predict(&mut self, batch: Vec<Tensor>) -> Result<Prediction, ItemError> {
///         let x = batch.input("x")?;
///         x.expect_shape(&[-1, 1])?;
///         self.buffer.clear();
///         self.buffer.extend(x.values::<f32>()?.iter().map(|v| v * self.scale));
///         Ok(Prediction::new(vec![Tensor::from_f32("y", &x.shape, &self.buffer)]))
///     }
/// }
///
/// export_predictor!(Scaler);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a tensorplug `Predictor`",
    label = "`export_predictor!` needs a type that implements `Predictor`",
    note = "implement `tensorplug_guest::Predictor` for `{Self}`: \
            `fn init(parameters: Parameters) -> Result<Self, String>` and \
            `fn predict(&mut self, batch: Vec<Tensor>) -> Result<Prediction, ItemError>`",
    note = "a preprocessor is exported with `export_preprocessor!`, a postprocessor with `export_postprocessor!`"
)]
pub trait Predictor: Sized + 'static {
    /// Builds the plugin's state from the model's `[parameters]`; called once per plugin
    /// instance, before any [`predict`](Predictor::predict).
    ///
    /// The model's folder is readable at [`MODEL_DIR`](crate::MODEL_DIR) (see
    /// [`read_model_file`](crate::read_model_file)), e.g. for weights.
    ///
    /// # Errors
    /// A message that keeps the model from loading; the host reports it as the reason.
    fn init(parameters: Parameters) -> Result<Self, String>;

    /// Runs the model on a batch.
    ///
    /// `batch` holds one tensor per input, each with a new leading dimension N (the batch
    /// size, at least 1). Return outputs with leading dimension N, one row per item, and
    /// list the items that failed in [`Prediction::failures`] (see
    /// [`Prediction::with_failures`]); their rows are ignored.
    ///
    /// # Errors
    /// An error fails every item of the batch with its status and message.
    fn predict(&mut self, batch: Vec<Tensor>) -> Result<Prediction, ItemError>;
}

/// The preprocess stage: turns each client item into what predict expects.
///
/// Implement it for the plugin's state type and export that type with
/// [`export_preprocessor!`](crate::export_preprocessor). As for [`Predictor`],
/// [`init`](Preprocessor::init) is called once per plugin instance and its value is
/// handed to every [`preprocess`](Preprocessor::preprocess) call as `&mut self`.
///
/// ```no_run
/// use tensorplug_guest::prelude::*;
///
/// /// Accepts `image: FP32 [28, 28]` with pixels in `0..=max` and flattens it to `[784]`.
/// struct Flatten {
///     max: f32,
/// }
///
/// impl Preprocessor for Flatten {
///     fn init(parameters: Parameters) -> Result<Self, String> {
///         Ok(Flatten { max: parameters.parse_or("pixel_max", 255.0)? })
///     }
///
///     fn preprocess(&mut self, items: Vec<Item>) -> Vec<Result<Item, ItemError>> {
///         items.into_iter().map(|item| self.flatten(item)).collect()
///     }
/// }
///
/// impl Flatten {
///     fn flatten(&self, mut item: Item) -> Result<Item, ItemError> {
///         let image = item.take_input("image")?;
///         image.expect_shape(&[28, 28])?;
///         if image.values::<f32>()?.iter().any(|v| !(0.0..=self.max).contains(v)) {
///             return Err(ItemError::bad_request(format!("image: pixels must be in 0..={}", self.max)));
///         }
///         Ok(vec![Tensor { shape: vec![784], ..image }])
///     }
/// }
///
/// export_preprocessor!(Flatten);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a tensorplug `Preprocessor`",
    label = "`export_preprocessor!` needs a type that implements `Preprocessor`",
    note = "implement `tensorplug_guest::Preprocessor` for `{Self}`: \
            `fn init(parameters: Parameters) -> Result<Self, String>` and \
            `fn preprocess(&mut self, items: Vec<Item>) -> Vec<Result<Item, ItemError>>`",
    note = "a predictor is exported with `export_predictor!`, a postprocessor with `export_postprocessor!`"
)]
pub trait Preprocessor: Sized + 'static {
    /// Builds the plugin's state from the model's `[parameters]`; called once per plugin
    /// instance, before any [`preprocess`](Preprocessor::preprocess). See
    /// [`Predictor::init`].
    ///
    /// # Errors
    /// A message that keeps the model from loading; the host reports it as the reason.
    fn init(parameters: Parameters) -> Result<Self, String>;

    /// Preprocesses client items: one result per item, in order (the host checks the
    /// count). An `Err` fails that item alone.
    fn preprocess(&mut self, items: Vec<Item>) -> Vec<Result<Item, ItemError>>;
}

/// The postprocess stage: turns predict's per-item outputs into the response.
///
/// Implement it for the plugin's state type and export that type with
/// [`export_postprocessor!`](crate::export_postprocessor). As for [`Predictor`],
/// [`init`](Postprocessor::init) is called once per plugin instance and its value is
/// handed to every [`postprocess`](Postprocessor::postprocess) call as `&mut self`. The items are
/// predict's outputs split back into one item per example (without the batch dimension).
///
/// ```no_run
/// use tensorplug_guest::prelude::*;
///
/// /// Replaces `scores: FP32 [C]` with `label: BYTES [1]`, the name of the best class.
/// struct Labels {
///     names: Vec<String>,
/// }
///
/// impl Postprocessor for Labels {
///     fn init(_: Parameters) -> Result<Self, String> {
///         let text = read_model_file("labels.txt")?;
///         let text = String::from_utf8(text).map_err(|e| format!("labels.txt: {e}"))?;
///         Ok(Labels { names: text.lines().map(str::to_owned).collect() })
///     }
///
///     fn postprocess(&mut self, items: Vec<Item>) -> Vec<Result<Item, ItemError>> {
///         items.into_iter().map(|item| self.label(item)).collect()
///     }
/// }
///
/// impl Labels {
///     fn label(&self, item: Item) -> Result<Item, ItemError> {
///         let scores = item.input("scores")?.to_f32()?;
///         let best = (0..scores.len())
///             .max_by(|&a, &b| scores[a].total_cmp(&scores[b]))
///             .ok_or_else(|| ItemError::internal("no scores"))?;
///         let name = self.names.get(best).ok_or_else(|| ItemError::internal(format!("no name for class {best}")))?;
///         Ok(vec![Tensor::from_bytes("label", &[1], [name])])
///     }
/// }
///
/// export_postprocessor!(Labels);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a tensorplug `Postprocessor`",
    label = "`export_postprocessor!` needs a type that implements `Postprocessor`",
    note = "implement `tensorplug_guest::Postprocessor` for `{Self}`: \
            `fn init(parameters: Parameters) -> Result<Self, String>` and \
            `fn postprocess(&mut self, items: Vec<Item>) -> Vec<Result<Item, ItemError>>`",
    note = "a preprocessor is exported with `export_preprocessor!`, a predictor with `export_predictor!`"
)]
pub trait Postprocessor: Sized + 'static {
    /// Builds the plugin's state from the model's `[parameters]`; called once per plugin
    /// instance, before any [`postprocess`](Postprocessor::postprocess). See
    /// [`Predictor::init`].
    ///
    /// # Errors
    /// A message that keeps the model from loading; the host reports it as the reason.
    fn init(parameters: Parameters) -> Result<Self, String>;

    /// Postprocesses predict's outputs, one item per example: one result per item, in
    /// order (the host checks the count). An `Err` fails that item alone.
    fn postprocess(&mut self, items: Vec<Item>) -> Vec<Result<Item, ItemError>>;
}
