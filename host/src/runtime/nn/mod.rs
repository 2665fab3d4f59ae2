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
//! - **Loading is bounded** ([`budget`]): at most `limits.graph_max_nodes` nodes per graph;
//!   what the model's graphs hold after optimisation (constants, packed weights, values
//!   folded at load) at most `limits.graph_memory_mib`, checked before each constant or
//!   folded value is allocated; a load at most [`GRAPH_LOAD_TIMEOUT`] (past it the model
//!   fails; the load, which cannot be interrupted, finishes on its own thread within the
//!   memory budget and is thrown away). What the graphs hold is `graph_bytes`.
//! - **Compute is bounded**: inputs are checked against the graph's declared inputs (names,
//!   element types, ranks, fixed sizes; a symbolic size at most [`MAX_DYNAMIC_DIM`]; the
//!   data's length) before anything runs, as `invalid-argument` errors. Compute runs on
//!   the instance's thread, where epochs cannot interrupt it, so tract's plan reads the
//!   call's deadline (the instant the stage call runs to) before every node and stops
//!   there; the call then traps as a time limit (`timeout_ms`, or `init_timeout_ms` in
//!   `init`: 504 like any other), and the instance is replaced. What bounds the time
//!   past the deadline is one node's cost: with fixed sizes from the graph and a
//!   symbolic size at most [`MAX_DYNAMIC_DIM`], the largest node of a legal graph (e.g.
//!   a 4096x1024 by 1024x1024 MatMul, 4.3 G multiply-adds) takes ~0.2 s alone here; such
//!   a graph's computes answer that much after their deadline (counted in
//!   `tensorplug_nn_compute_overrun_seconds`). No CPU keeps burning after the answer.
//!   Every value a node computes counts against the instance's memory
//!   (`limits.memory_mib`): a node whose outputs would pass it is refused before it runs
//!   where its size is known from the graph and the inputs (and just after it otherwise),
//!   as the item's `runtime-error`; a graph where one always would is refused at load.
//!   tract's errors (and panics, caught) reach the plugin as `runtime-error`s, never as a
//!   host panic.

pub mod budget;
pub mod counters;
mod host;
mod inputs;
mod onnxruntime;
mod plans;
mod tract;
mod watch;

/// ONNX graphs built in code, for both backends' tests.
#[cfg(test)]
#[path = "../../../../tests/common/onnx.rs"]
mod onnx;

/// What both backends' tests share.
#[cfg(test)]
mod test_support {
    use super::{GraphLimits, NamedTensor, NnTensor, RunError, TensorType};
    use crate::runtime::nn::budget::Refused;
    use std::path::Path;
    use std::time::{Duration, Instant};

    pub const MIB: u64 = 1 << 20;

    pub fn limits() -> GraphLimits {
        GraphLimits {
            memory_bytes: 256 * MIB,
            max_nodes: 10_000,
            value_bytes: 64 * MIB,
        }
    }

    pub fn fp32(dimensions: &[u32], values: &[f32]) -> NnTensor {
        NnTensor {
            dimensions: dimensions.to_vec(),
            ty: TensorType::Fp32,
            data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        }
    }

    pub fn later() -> Instant {
        Instant::now() + Duration::from_secs(60)
    }

    pub fn invalid(result: Result<Vec<NamedTensor>, RunError>) -> String {
        match result {
            Err(RunError::Invalid(message)) => message,
            other => panic!("expected an invalid input, got {other:?}"),
        }
    }

    /// A graph's compute, as its tests call it.
    pub type Run<'a> = &'a dyn Fn(Vec<NamedTensor>, Instant, u64) -> super::Computed;

    /// The digits graph refuses bad inputs before anything runs, naming what is wrong.
    pub fn digits_inputs_are_checked(run: Run<'_>) {
        let one = |tensor| run(vec![("x".into(), tensor)], later(), 64 * MIB);
        let shape = invalid(one(fp32(&[1, 63], &[0.0; 63])));
        assert!(shape.contains("shape [1, 63]"), "{shape}");
        let huge = invalid(one(fp32(&[5000, 64], &[])));
        assert!(huge.contains("at most 4096"), "{huge}");
        let short = invalid(one(fp32(&[2, 64], &[0.0; 64])));
        assert!(short.contains("256 bytes of data"), "{short}");
        let ints = NnTensor {
            dimensions: vec![1, 64],
            ty: TensorType::I32,
            data: vec![0; 256],
        };
        let typed = invalid(one(ints));
        assert!(typed.contains("element type I32"), "{typed}");
        let none = invalid(run(vec![], later(), 64 * MIB));
        assert!(none.contains("takes 1 input(s)"), "{none}");
    }

    /// A compute of `onnx::matmul_chain(200, 256, Some(256))` stops at its deadline.
    pub fn a_long_compute_stops_at_its_deadline(run: Run<'_>) {
        let x = || vec![(String::new(), fp32(&[256, 256], &[1.0; 256 * 256]))];
        let started = Instant::now();
        let whole = run(x(), later(), 64 * MIB).unwrap();
        let full = started.elapsed();
        assert_eq!(whole[0].1.dimensions, [256, 256]);
        let deadline = Instant::now() + full / 4;
        let outcome = run(x(), deadline, 64 * MIB);
        let late = Instant::now().saturating_duration_since(deadline);
        assert!(matches!(outcome, Err(RunError::Deadline)), "{outcome:?}");
        // One 256x256 MatMul takes a few milliseconds; without the check it would end
        // 3/4 of a run late. (Lenient: the tests share two cores with other builds.)
        assert!(late < full / 2, "stopped {late:?} late (a whole run: {full:?})");
        // What ran it can run again.
        assert!(run(x(), later(), 64 * MIB).is_ok());
    }

    /// `onnx::widen(65_536)`'s computes: a value larger than the instance is refused.
    pub fn values_past_the_instance_are_refused(run: Run<'_>) {
        // [N, 1] x [1, 65536]: 256 KiB per row, so 1024 rows would be 256 MiB.
        let ones = |rows: u32| vec![(String::new(), fp32(&[rows, 1], &vec![1.0; rows as usize]))];
        assert_eq!(run(ones(4), later(), 64 * MIB).unwrap()[0].1.dimensions, [4, 65_536]);
        match run(ones(1024), later(), 64 * MIB) {
            Err(RunError::TooLarge(message)) => {
                assert!(
                    message.contains("268435456 bytes") && message.contains("limits.memory_mib"),
                    "{message}"
                )
            }
            other => panic!("{other:?}"),
        }
    }

    /// `bytes` as a graph file loaded by `load` under `limits`.
    pub fn load_file<G>(
        bytes: &[u8],
        limits: GraphLimits,
        load: impl FnOnce(&Path, &Path, &GraphLimits, u64) -> Result<G, Refused>,
    ) -> Result<G, Refused> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("g.onnx"), bytes).unwrap();
        load(dir.path(), &dir.path().join("g.onnx"), &limits, limits.memory_bytes)
    }
}

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use self::budget::GraphLimits;
use self::budget::{GraphMemory, Refusal, Refused};
pub use self::host::{NnContext, NnError, NnGraph, NnTensor};
pub use self::inputs::{NamedTensor, MAX_DYNAMIC_DIM};
pub use self::onnxruntime::{
    environment as onnxruntime_environment, set_library as set_onnxruntime_library,
    single_threaded as onnxruntime_session, OrtGraph, LIBRARY_ENV as ONNXRUNTIME_LIBRARY_ENV,
};
pub use self::plans::{Plans, MAX_CONCRETE_PLANS, MAX_PLANNED_DIM};
pub use self::tract::{TractGraph, MAX_GRAPH_BYTES};
pub use super::bindings::nn::tensor::TensorType;
use crate::model::config::{GraphBackend, GraphSpec};

/// A compute's outputs, or why there are none.
pub type Computed = Result<Vec<NamedTensor>, RunError>;

/// Why a compute failed.
#[derive(Debug)]
pub enum RunError {
    /// The inputs do not fit the graph's declared inputs (nothing ran).
    Invalid(String),
    /// The graph failed while running.
    Failed(String),
    /// The call's deadline passed: the compute stopped between two nodes.
    Deadline,
    /// A value would not fit the instance's memory: stopped before computing it.
    TooLarge(String),
}

/// Why a model's graph could not be loaded.
#[derive(Debug, thiserror::Error)]
#[error("{}: graph '{name}': {reason}", file.display())]
pub struct GraphError {
    pub name: String,
    pub file: PathBuf,
    pub reason: String,
}

/// One graph, run by the backend its `[graphs]` entry names.
#[derive(Debug)]
pub enum Graph {
    Tract(TractGraph),
    OnnxRuntime(OrtGraph),
}

impl Graph {
    fn load(dir: &Path, spec: &GraphSpec, limits: &GraphLimits, budget: u64) -> Result<Self, Refused> {
        match spec.backend {
            GraphBackend::Tract => TractGraph::load(dir, &spec.file, limits, budget).map(Graph::Tract),
            GraphBackend::OnnxRuntime => {
                OrtGraph::load(dir, &spec.file, limits, budget, spec.threads).map(Graph::OnnxRuntime)
            }
        }
    }

    /// Host memory the graph holds.
    pub fn bytes(&self) -> u64 {
        match self {
            Graph::Tract(graph) => graph.bytes(),
            Graph::OnnxRuntime(graph) => graph.bytes(),
        }
    }

    fn share_memory(&self, memory: Arc<GraphMemory>) {
        match self {
            Graph::Tract(graph) => graph.share_memory(memory),
            Graph::OnnxRuntime(graph) => graph.share_memory(memory),
        }
    }

    /// The graph's inputs as `name: TYPE [dims]` (`N` for a symbolic dimension).
    pub fn describe_inputs(&self) -> String {
        match self {
            Graph::Tract(graph) => graph.describe_inputs(),
            Graph::OnnxRuntime(graph) => graph.describe_inputs(),
        }
    }

    /// Runs the graph on `inputs`, checked against its declared inputs first; the
    /// compute stops at `deadline`, and before a value larger than `value_bytes`.
    pub fn run(&self, inputs: Vec<NamedTensor>, deadline: Instant, value_bytes: u64) -> Computed {
        match self {
            Graph::Tract(graph) => graph.run(inputs, deadline, value_bytes),
            Graph::OnnxRuntime(graph) => graph.run(inputs, deadline, value_bytes),
        }
    }
}

/// The graphs of one model version, parsed and runnable, by name.
#[derive(Debug, Default)]
pub struct ModelGraphs {
    graphs: HashMap<String, Arc<Graph>>,
    /// How long each graph took to load (read, analysed, planned or given its first
    /// session), in load order.
    load_times: Vec<(String, Duration)>,
}

/// Longest the loads of one model's graphs may take together (a 10,000-node graph
/// loads in a few seconds).
pub const GRAPH_LOAD_TIMEOUT: Duration = Duration::from_secs(30);

impl ModelGraphs {
    /// Loads every `(name, file)` inside `dir` within `limits` (see the module's
    /// documentation).
    pub fn load(dir: &Path, graphs: &[GraphSpec], limits: GraphLimits) -> Result<Self, GraphError> {
        Self::load_within(dir, graphs, limits, GRAPH_LOAD_TIMEOUT)
    }

    fn load_within(
        dir: &Path,
        graphs: &[GraphSpec],
        limits: GraphLimits,
        timeout: Duration,
    ) -> Result<Self, GraphError> {
        let until = Instant::now() + timeout;
        let mut loaded = HashMap::with_capacity(graphs.len());
        let mut load_times = Vec::with_capacity(graphs.len());
        let memory = Arc::new(GraphMemory::new(limits.memory_bytes));
        for spec in graphs {
            let started = Instant::now();
            let error = |refused: Refused| {
                counters::graph_refused(refused.limit);
                GraphError {
                    name: spec.name.clone(),
                    file: spec.file.clone(),
                    reason: refused.reason,
                }
            };
            let graph = load_one(dir, spec, limits, memory.left(), (until, timeout)).map_err(error)?;
            // Fits: loaded within what was left.
            memory.take(graph.bytes());
            graph.share_memory(memory.clone());
            loaded.insert(spec.name.clone(), Arc::new(graph));
            load_times.push((spec.name.clone(), started.elapsed()));
        }
        Ok(Self {
            graphs: loaded,
            load_times,
        })
    }

    /// How long each graph took to load, in load order.
    pub fn load_times(&self) -> &[(String, Duration)] {
        &self.load_times
    }

    pub fn is_empty(&self) -> bool {
        self.graphs.is_empty()
    }

    /// Host memory the graphs hold: their plans' constants (concrete plans included, as
    /// they are made).
    pub fn bytes(&self) -> u64 {
        self.graphs.values().map(|g| g.bytes()).sum()
    }

    /// The graphs' names, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.graphs.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }

    pub fn get(&self, name: &str) -> Option<&Arc<Graph>> {
        self.graphs.get(name)
    }
}

/// Loads one graph on its own thread, waiting for it until `until` (`timeout` after the
/// model's first graph started).
fn load_one(
    dir: &Path,
    spec: &GraphSpec,
    limits: GraphLimits,
    budget: u64,
    (until, timeout): (Instant, Duration),
) -> Result<Graph, Refused> {
    let (dir, spec) = (dir.to_path_buf(), spec.clone());
    let (done, loaded) = std::sync::mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("tensorplug-graph".into())
        .spawn(move || {
            let _ = done.send(Graph::load(&dir, &spec, &limits, budget));
        })
        .map_err(|e| Refused {
            limit: Refusal::Invalid,
            reason: format!("cannot start loading: {e}"),
        })?;
    match loaded.recv_timeout(until.saturating_duration_since(Instant::now())) {
        Ok(result) => result,
        Err(_) => Err(Refused {
            limit: Refusal::Time,
            reason: format!(
                "loading the model's graphs took longer than {} ms; refused (the graph load time limit)",
                timeout.as_millis()
            ),
        }),
    }
}
