//! The WebAssembly runtime: compiles plugins, builds sandboxed stores and calls stages.
//!
//! Knows nothing of HTTP, batching or models beyond the tags it logs with: the pipeline
//! above it decides what to call with what.

mod allocator;
pub use allocator::{purge_in_background, release_free_memory};
mod bindings;
mod compile;
mod components;
mod convert;
mod deadline;
mod declared;
pub use deadline::{on_this_runtime_thread, EPOCH_TICK};
pub use declared::{declared_instance_bytes, declared_instance_bytes_of_file};
mod engine;
mod memory;
mod memory_images;
pub mod nn;
mod output;
pub mod plugin_metrics;
mod precompiled;
mod shared;
mod stage;
mod store;
mod wasi_files;
mod wit_version;

pub use compile::{precompile, CompileReport, CompileSource};
pub use engine::Runtime;
pub use shared::ModelShared;
pub use stage::{Prediction, StageInstance, StageTemplate, Trapped};
pub use store::{SandboxLimits, StageTag, MODEL_DIR_GUEST_PATH};
pub use wit_version::WitVersion;

use std::path::PathBuf;

/// Why a runtime could not be built, or a stage could not be loaded or instantiated.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("wasm engine: {0}")]
    Engine(String),
    #[error("sandbox: {0}")]
    Sandbox(String),
    #[error("{}: {reason}", file.display())]
    Load { file: PathBuf, reason: String },
    #[error("{}: {reason}", file.display())]
    Init { file: PathBuf, reason: String },
    #[error(transparent)]
    Graph(#[from] nn::GraphError),
}

/// The operating system's error in `error`'s chain, if a system call the host made failed
/// (the host's trouble, never the plugin's).
fn os_error(error: &wasmtime::Error) -> Option<&std::io::Error> {
    error.chain().find_map(|cause| cause.downcast_ref::<std::io::Error>())
}
