//! The kinds of stage a model's pipeline has.

/// The three kinds of stage, one per WIT world, in pipeline order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StageKind {
    Preprocess,
    Predict,
    Postprocess,
}

impl StageKind {
    /// The stage's name, as `model.toml`'s `[stages]` and log lines call it.
    pub fn name(self) -> &'static str {
        match self {
            StageKind::Preprocess => "preprocess",
            StageKind::Predict => "predict",
            StageKind::Postprocess => "postprocess",
        }
    }
}
