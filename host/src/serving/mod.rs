//! Serving: models in service (their batchers and instance threads), the repository
//! that maps names to live versions and watches the folder, and the mapping between a
//! request's tensors and its items.

mod batcher;
mod files_metrics;
mod handoff;
mod histogram;
mod idle;
mod instances;
pub mod items;
mod loaders;
pub mod metrics;
mod model;
mod on_demand;
mod pool;
mod repository;
pub mod residency;
mod stats;
mod watch;

pub use batcher::SubmitError;
pub use instances::Completion;
pub use model::{Model, StartError};
pub use repository::{Entry, ModelState, ModelStatus, Repository, RepositoryError};
pub use residency::{LoadProgress, ResidencyMode, ResidencyPolicy, Standby};
pub use stats::{EdgeLabel, ModelStats, StatsSnapshot};
pub use watch::{watch, RepositoryWatch};
