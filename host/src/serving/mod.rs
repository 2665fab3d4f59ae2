//! Serving: loaded models, their batchers and instance pools, and the repository that
//! maps names to live versions.

mod batcher;
mod instances;
mod model;
mod repository;
mod stats;
mod watch;

pub use batcher::SubmitError;
pub use instances::Completion;
pub use model::{LoadError, Model};
pub use repository::{Entry, ModelState, ModelStatus, Repository, RepositoryError};
pub use stats::{ModelStats, StatsSnapshot};
pub use watch::{watch, RepositoryWatch};
