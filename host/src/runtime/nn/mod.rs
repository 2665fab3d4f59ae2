//! `wasi:nn` for every stage: the `wasi:nn@0.2.0-rc-2024-10-28` interfaces (graph, tensor,
//! inference, errors; `wit/deps/wasi-nn`) implemented by the host ([`host`]) over
//! `tract-onnx`, a pure-Rust ONNX runtime ([`tract`]).
//!
//! - **Graphs come from the model folder only.** `model.toml`'s `[graphs]` names them; each
//!   is read (at most [`MAX_GRAPH_BYTES`], symlinks resolved and kept inside the folder),
//!   parsed, optimised and made runnable once per model version, at load
//!   ([`ModelGraphs::load`]), and shared by every instance ([`super::ModelShared`]).
//!   Plugins reach them with `load-by-name`; `load` (plugin-supplied bytes) is refused:
//!   parsing and optimising an arbitrary graph has a cost the host cannot bound per call.
//! - **Compute is bounded**: inputs are checked against the graph's declared inputs (names,
//!   element types, ranks, fixed sizes; a symbolic size at most [`MAX_DYNAMIC_DIM`]; the
//!   data's length) before anything runs, as `invalid-argument` errors; compute runs on
//!   the instance's thread, where epochs cannot interrupt it, so the call's deadline is
//!   checked before and when it returns, and a call past it traps as a time limit (the
//!   stage's `timeout_ms`, answered 504 like any other). tract's errors (and panics,
//!   caught) reach the plugin as `runtime-error`s, never as a host panic.

mod host;
mod tract;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

pub use self::host::{NnContext, NnError, NnGraph, NnTensor};
pub use self::tract::{RunError, TractGraph, MAX_DYNAMIC_DIM, MAX_GRAPH_BYTES};
pub use super::bindings::nn::tensor::TensorType;

/// Why a model's graph could not be loaded.
#[derive(Debug, thiserror::Error)]
#[error("{}: graph '{name}': {reason}", file.display())]
pub struct GraphError {
    pub name: String,
    pub file: PathBuf,
    pub reason: String,
}

/// The graphs of one model version, parsed and runnable, by name.
#[derive(Debug, Default)]
pub struct ModelGraphs {
    graphs: HashMap<String, Arc<TractGraph>>,
}

impl ModelGraphs {
    /// Loads every `(name, file)` inside `dir` (see the module's documentation).
    pub fn load(dir: &std::path::Path, graphs: &[(String, PathBuf)]) -> Result<Self, GraphError> {
        let mut loaded = HashMap::with_capacity(graphs.len());
        for (name, file) in graphs {
            let graph = TractGraph::load(dir, file).map_err(|reason| GraphError {
                name: name.clone(),
                file: file.clone(),
                reason,
            })?;
            loaded.insert(name.clone(), Arc::new(graph));
        }
        Ok(Self { graphs: loaded })
    }

    pub fn is_empty(&self) -> bool {
        self.graphs.is_empty()
    }

    /// Host memory the graphs hold, estimated as their files' bytes.
    pub fn bytes(&self) -> u64 {
        self.graphs.values().map(|g| g.bytes()).sum()
    }

    /// The graphs' names, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.graphs.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }

    pub fn get(&self, name: &str) -> Option<&Arc<TractGraph>> {
        self.graphs.get(name)
    }
}
