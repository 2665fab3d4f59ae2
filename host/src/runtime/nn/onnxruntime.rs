//! The ONNX Runtime backend, for graphs whose `[graphs]` entry says
//! `backend = "onnxruntime"`: the shared library the operator names
//! (`--onnxruntime-lib`, `TENSORPLUG_ONNXRUNTIME_LIB`) loaded at the first such graph's
//! load, never downloaded; without it, those models fail their load with the reason and
//! tract's graphs serve as before.
//!
//! The limits hold as for tract, the same way:
//! - **load**: the graph is analysed by tract first ([`super::tract::analyse`]: the file
//!   size cap, node count, graph bombs, graph memory, load time), so a file ONNX Runtime
//!   would load but tract cannot analyse is refused;
//! - **inputs**: the declared inputs' checks ([`super::inputs`]) before anything runs;
//! - **memory**: each node's output size from tract's shape analysis, evaluated for the
//!   call's sizes, must fit the instance's memory before ONNX Runtime runs; what the graph
//!   holds is counted in the model's graph memory: its file, its shared weights twice (the
//!   values and their pre-packed forms), and per session twice the constants not shared
//!   (at least 4 MiB);
//! - **deadline**: the compute's `RunOptions` are terminated at the call's deadline by a
//!   watching thread ([`super::watch`]); ONNX Runtime stops between two nodes and the
//!   call traps as a time limit.
//!
//! Sessions run one compute at a time (`ort`'s `run` takes `&mut`): each graph keeps a
//! pool, one session per compute running at once (so at most one per instance). A
//! session computes on the instance's thread alone, like tract: nodes one after another
//! (sequential execution, so no inter-op pool), one intra-op thread (the caller's, so
//! ONNX Runtime makes no pool), no spinning ([`session_builder`]). A graph's `threads`
//! (`[graphs]`, at most [`MAX_GRAPH_THREADS`]) gives each of its sessions that many
//! intra-op threads instead: the caller's and `threads - 1` of ONNX Runtime's own, made
//! with the session and asleep between computes; a model's computes then use at most
//! `instances × threads` cores.
//!
//! The weights are held once per graph however many sessions run it ([`SharedWeights`]):
//! every session is given the graph's large initializers as values made once
//! (`AddInitializer`) and one container for their pre-packed forms, so a session adds
//! its working memory, not another copy of the weights.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Instant;

use ort::environment::Environment;
use ort::session::builder::{GraphOptimizationLevel, PrepackedWeights, SessionBuilder};
use ort::session::{RunOptions, Session, SessionInputValue};
use ort::value::{DynValue, PrimitiveTensorElementType, Tensor as OrtTensor, TensorElementType, ValueType};
use tract_onnx::prelude::{Framework, Symbol, SymbolValues, TDim};

use super::budget::{self, GraphLimits, GraphMemory, Refusal, Refused};
use super::host::NnTensor as Tensor;
use super::inputs::{self, InputSpec, NamedTensor, MAX_DYNAMIC_DIM};
use super::tract::{analyse, clear_upper_vector_state, read_graph, template_symbols, too_large, Analysed};
use super::{Computed, RunError};
use crate::model::config::MAX_GRAPH_THREADS;
use crate::runtime::bindings::nn::tensor::TensorType;
use crate::sync::{lock, wait_timeout};

/// The environment variable naming the library (also `--onnxruntime-lib`'s).
pub const LIBRARY_ENV: &str = "TENSORPLUG_ONNXRUNTIME_LIB";

static LIBRARY: OnceLock<PathBuf> = OnceLock::new();
static ENVIRONMENT: OnceLock<Result<Environment, String>> = OnceLock::new();

/// Names the ONNX Runtime library (`libonnxruntime.so.*`) for the process, before the
/// first graph that needs it loads; the first call wins.
pub fn set_library(path: PathBuf) {
    let _ = LIBRARY.set(path);
}

/// The library named by [`set_library`], else by [`LIBRARY_ENV`].
fn library() -> Option<PathBuf> {
    LIBRARY
        .get()
        .cloned()
        .or_else(|| std::env::var_os(LIBRARY_ENV).map(PathBuf::from))
        .filter(|path| !path.as_os_str().is_empty())
}

/// ONNX Runtime's environment (one per process), the library loaded on first use.
pub fn environment() -> Result<&'static Environment, String> {
    ENVIRONMENT
        .get_or_init(|| {
            let path = library().ok_or_else(|| {
                format!(
                    "the graph asks for ONNX Runtime (backend = \"onnxruntime\") and no library was given: start tensorplug with --onnxruntime-lib <libonnxruntime.so> (or {LIBRARY_ENV})"
                )
            })?;
            let builder = ort::init_from(&path)
                .map_err(|e| format!("cannot load ONNX Runtime from {}: {e}", path.display()))?;
            builder
                .with_name("tensorplug")
                .with_telemetry(false)
                .build()
                .map_err(|e| format!("cannot start ONNX Runtime from {}: {e}", path.display()))
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// A graph run by ONNX Runtime.
pub struct OrtGraph {
    /// The file, for the sessions made while serving.
    file: Vec<u8>,
    inputs: Vec<InputSpec>,
    outputs: Vec<String>,
    /// The inputs' names as ONNX Runtime's sessions of this file list them (every
    /// session of one file lists the same), in the order of `inputs`.
    session_inputs: Vec<String>,
    /// Where each symbolic input dimension is, and its symbol in `guards`.
    symbolic: Vec<(usize, usize)>,
    symbols: Vec<Symbol>,
    /// The nodes whose outputs could pass an instance's memory: their name and size.
    guards: Vec<(String, TDim)>,
    /// The weights every session shares.
    weights: SharedWeights,
    /// Each session's intra-op threads (`threads` in `[graphs]`).
    threads: u32,
    sessions: Mutex<Sessions>,
    returned: Condvar,
    /// What one session is counted for.
    session_bytes: u64,
    memory: Mutex<Arc<GraphMemory>>,
}

struct Sessions {
    idle: Vec<Pooled>,
    made: u64,
    /// Computes waiting for a session to be given back (woken only when there are some:
    /// a condition variable's notify is a system call even with nobody waiting).
    waiting: usize,
}

/// A session with the run options its computes use (made once: a terminated compute's
/// are reset before the next).
struct Pooled {
    session: Session,
    options: Arc<RunOptions>,
}

impl Pooled {
    fn new(session: Session) -> Result<Self, String> {
        let options = RunOptions::new().map_err(|e| format!("ONNX Runtime: {e}"))?;
        Ok(Pooled {
            session,
            options: Arc::new(options),
        })
    }
}

impl OrtGraph {
    /// Reads `file` (inside `dir`, at most [`MAX_GRAPH_BYTES`]), analyses it with tract
    /// within `limits`, and makes its first session, computing on `threads` intra-op
    /// threads (1: the caller's alone); `budget` is what is left of the model's graph
    /// memory.
    pub fn load(dir: &Path, file: &Path, limits: &GraphLimits, budget: u64, threads: u32) -> Result<Self, Refused> {
        let failed = |reason: String| Refused {
            limit: Refusal::Invalid,
            reason,
        };
        if !(1..=MAX_GRAPH_THREADS).contains(&threads) {
            return Err(failed(format!(
                "threads = {threads}: a graph's computes use 1 to {MAX_GRAPH_THREADS} threads"
            )));
        }
        // The library first: every ONNX Runtime call needs it, the shared weights' too.
        environment().map_err(failed)?;
        let bytes = read_graph(dir, file)?;
        let analysed: Analysed = analyse(&bytes, limits, budget)?;
        let (decluttered, inputs, outputs, symbolic) = (
            analysed.decluttered,
            analysed.inputs,
            analysed.outputs,
            analysed.symbolic,
        );
        let constants = budget::held_bytes(&decluttered);
        let weights = SharedWeights::of(&bytes).map_err(failed)?;
        // What a session holds beyond the shared weights: the graph's other constants
        // (twice: its copy and their pre-packed form). The shared weights themselves are
        // counted once, twice over (the values and their pre-packed forms).
        let session_bytes = constants
            .saturating_sub(weights.bytes)
            .saturating_mul(2)
            .max(SESSION_BYTES_FLOOR);
        let held = (bytes.len() as u64)
            .saturating_add(weights.bytes.saturating_mul(2))
            .saturating_add(session_bytes);
        if held > budget {
            return Err(Refused {
                limit: Refusal::Memory,
                reason: format!(
                    "the graph and its ONNX Runtime session hold about {held} bytes; the model's graphs may hold at most {budget} bytes (limits.graph_memory_mib)"
                ),
            });
        }
        let guards = budget::value_guards(&decluttered, limits.value_bytes, MAX_DYNAMIC_DIM as i64)?
            .into_iter()
            .enumerate()
            .filter_map(|(node, guard)| Some((decluttered.node(node).name.clone(), guard?)))
            .collect();
        let symbols = template_symbols(&decluttered, &symbolic).unwrap_or_default();
        drop(decluttered);
        let session = Pooled::new(new_session(&bytes, &weights, threads).map_err(failed)?).map_err(failed)?;
        let session_inputs = session.session.inputs().iter().map(|i| i.name().to_string()).collect();
        let declared: Vec<&str> = session.session.outputs().iter().map(|o| o.name()).collect();
        if declared != outputs.iter().map(String::as_str).collect::<Vec<_>>() {
            return Err(failed(format!(
                "ONNX Runtime and tract disagree on the graph's outputs ({declared:?} against {outputs:?})"
            )));
        }
        Ok(OrtGraph {
            file: bytes,
            inputs,
            session_inputs,
            outputs,
            symbolic,
            symbols,
            guards,
            weights,
            threads,
            sessions: Mutex::new(Sessions {
                idle: vec![session],
                made: 1,
                waiting: 0,
            }),
            returned: Condvar::new(),
            session_bytes,
            memory: Mutex::new(Arc::new(GraphMemory::new(budget - held))),
        })
    }

    /// What the graph holds: its file, the shared weights and their pre-packed forms, and
    /// its sessions (estimated).
    pub fn bytes(&self) -> u64 {
        let made = lock(&self.sessions).made;
        (self.file.len() as u64)
            .saturating_add(self.weights.bytes.saturating_mul(2))
            .saturating_add(self.session_bytes.saturating_mul(made))
    }

    /// From now on, the sessions made while serving are taken from `memory`, the model's.
    pub fn share_memory(&self, memory: Arc<GraphMemory>) {
        *lock(&self.memory) = memory;
    }

    pub fn describe_inputs(&self) -> String {
        inputs::describe_all(&self.inputs)
    }

    /// Runs the graph on `inputs`, as [`super::TractGraph::run`] does.
    pub fn run(&self, inputs: Vec<NamedTensor>, deadline: Instant, value_bytes: u64) -> Computed {
        let inputs = inputs::checked(&self.inputs, inputs)?;
        self.check_values(&inputs, value_bytes)?;
        let mut session = self.session(deadline)?;
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            compute(&mut session, (&self.session_inputs, &inputs), deadline, value_bytes)
        }));
        clear_upper_vector_state();
        self.give_back(session);
        let named =
            outcome.map_err(|_| RunError::Failed("the graph failed: ONNX Runtime's binding panicked".into()))??;
        Ok(self.outputs.iter().cloned().zip(named).collect())
    }

    /// Refuses a compute where a node's outputs would pass the instance's memory.
    fn check_values(&self, inputs: &[Tensor], value_bytes: u64) -> Result<(), RunError> {
        if self.guards.is_empty() {
            return Ok(());
        }
        let mut values = SymbolValues::default();
        for (symbol, &(input, dim)) in self.symbols.iter().zip(&self.symbolic) {
            values = values.with(symbol, i64::from(inputs[input].dimensions[dim]));
        }
        for (node, bytes) in &self.guards {
            if let Ok(bytes) = bytes.eval(&values).to_i64() {
                if bytes as u64 > value_bytes {
                    return Err(RunError::TooLarge(too_large(node, bytes as u64, value_bytes)));
                }
            }
        }
        Ok(())
    }

    /// An idle session, a new one if the graph memory has room, else the next one given
    /// back (until `deadline`).
    fn session(&self, deadline: Instant) -> Result<Pooled, RunError> {
        let mut sessions = lock(&self.sessions);
        loop {
            if let Some(session) = sessions.idle.pop() {
                return Ok(session);
            }
            if lock(&self.memory).take(self.session_bytes) {
                sessions.made += 1;
                drop(sessions);
                return new_session(&self.file, &self.weights, self.threads)
                    .and_then(Pooled::new)
                    .map_err(|reason| {
                        self.forget_session();
                        RunError::Failed(format!("the graph failed: {reason}"))
                    });
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(RunError::Deadline);
            }
            sessions.waiting += 1;
            sessions = wait_timeout(&self.returned, sessions, deadline - now);
            sessions.waiting -= 1;
        }
    }

    fn give_back(&self, mut session: Pooled) {
        // The watch may have terminated the options just after the compute ended.
        if session.options.unterminate().is_err() {
            match RunOptions::new() {
                Ok(options) => session.options = Arc::new(options),
                Err(_) => return self.forget_session(),
            }
        }
        let mut sessions = lock(&self.sessions);
        sessions.idle.push(session);
        self.wake_a_waiter(&sessions);
    }

    /// A session that was counted is gone: its memory is free for another.
    fn forget_session(&self) {
        let mut sessions = lock(&self.sessions);
        sessions.made -= 1;
        lock(&self.memory).give_back(self.session_bytes);
        self.wake_a_waiter(&sessions);
    }

    /// Wakes one compute waiting for a session, if one waits.
    fn wake_a_waiter(&self, sessions: &Sessions) {
        if sessions.waiting > 0 {
            self.returned.notify_one();
        }
    }
}

impl std::fmt::Debug for OrtGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sessions = lock(&self.sessions).made;
        inputs::debug_graph(f, "OrtGraph", &self.inputs, &self.outputs, self.bytes())?;
        write!(f, " ({sessions} sessions)")
    }
}

/// A session of `model` on `threads` intra-op threads, on the graph's shared weights.
fn new_session(model: &[u8], weights: &SharedWeights, threads: u32) -> Result<Session, String> {
    let text = |e: ort::Error<_>| format!("ONNX Runtime: {e}");
    let mut builder = session_builder(environment()?, threads)?
        .with_prepacked_weights(&weights.prepacked)
        .map_err(text)?;
    for (name, value) in &weights.values {
        builder = builder.with_initializer(name, value.clone()).map_err(text)?;
    }
    builder
        .commit_from_memory(model)
        .map_err(|e| format!("ONNX Runtime cannot load the graph: {e}"))
}

/// What a session is counted for at least: its graph, kernels and arena beyond the weights.
const SESSION_BYTES_FLOOR: u64 = 4 << 20;

/// Initializers smaller than this stay in each session's graph: sharing them saves little.
const SHARED_INITIALIZER_BYTES: usize = 16 << 10;

/// A graph's weights, made once and given to every session of it.
struct SharedWeights {
    /// The large FP32 initializers, by name, as ONNX Runtime values.
    values: Vec<(String, Arc<DynValue>)>,
    /// Their pre-packed forms (what the kernels re-lay out at a session's start), kept by
    /// the first session that makes them and taken by the others.
    prepacked: PrepackedWeights,
    /// What `values` hold.
    bytes: u64,
}

impl SharedWeights {
    /// The large FP32 initializers of the ONNX graph in `file` (tract's analysis read it
    /// already, so it is well-formed and within the graph limits).
    fn of(file: &[u8]) -> Result<Self, String> {
        let proto = tract_onnx::onnx()
            .proto_model_for_read(&mut &file[..])
            .map_err(|e| format!("not a valid ONNX graph: {e:#}"))?;
        let mut values = Vec::new();
        let mut bytes = 0u64;
        for initializer in proto.graph.iter().flat_map(|graph| &graph.initializer) {
            let floats = match (initializer.data_type, initializer.raw_data.len()) {
                (FLOAT, len) if len >= SHARED_INITIALIZER_BYTES && len % 4 == 0 => initializer
                    .raw_data
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect::<Vec<f32>>(),
                (FLOAT, 0) if initializer.float_data.len() * 4 >= SHARED_INITIALIZER_BYTES => {
                    initializer.float_data.clone()
                }
                _ => continue,
            };
            let count: i64 = initializer.dims.iter().product();
            if count < 0 || count as usize != floats.len() {
                continue;
            }
            bytes += floats.len() as u64 * 4;
            let value = OrtTensor::from_array((initializer.dims.clone(), floats))
                .map_err(|e| format!("ONNX Runtime: {e}"))?
                .into_dyn();
            values.push((initializer.name.clone(), Arc::new(value)));
        }
        Ok(SharedWeights {
            values,
            prepacked: PrepackedWeights::new(),
            bytes,
        })
    }
}

/// ONNX's `TensorProto.DataType.FLOAT`.
const FLOAT: i32 = 1;

/// A session builder for how tensorplug runs ONNX Runtime by default (also what the
/// forward benchmark compares with): one thread, no spinning, every graph optimisation.
pub fn single_threaded(environment: &Environment) -> Result<SessionBuilder, String> {
    session_builder(environment, 1)
}

/// A session builder for a graph's `threads`: nodes run one after another (sequential
/// execution: no inter-op pool; its size is set to 1 all the same), each on `threads`
/// intra-op threads (the caller's and `threads - 1` of ONNX Runtime's; none for 1), none
/// spinning while idle; every graph optimisation.
fn session_builder(environment: &Environment, threads: u32) -> Result<SessionBuilder, String> {
    let text = |e: ort::Error<_>| format!("ONNX Runtime: {e}");
    Session::builder(environment)
        .map_err(|e| format!("ONNX Runtime: {e}"))?
        .with_parallel_execution(false)
        .map_err(text)?
        .with_intra_threads(threads as usize)
        .map_err(text)?
        .with_inter_threads(1)
        .map_err(text)?
        .with_intra_op_spinning(false)
        .map_err(text)?
        .with_inter_op_spinning(false)
        .map_err(text)?
        .with_optimization_level(GraphOptimizationLevel::All)
        .map_err(text)
}

/// Runs `session` on `inputs`, named by `names` (the session's own input names).
fn compute(
    Pooled { session, options }: &mut Pooled,
    (names, inputs): (&[String], &[Tensor]),
    deadline: Instant,
    value_bytes: u64,
) -> Result<Vec<Tensor>, RunError> {
    let failed = |e: ort::Error| RunError::Failed(format!("the graph failed: {e}"));
    let mut values: Vec<(Cow<'_, str>, SessionInputValue<'_>)> = Vec::with_capacity(inputs.len());
    for (name, tensor) in names.iter().zip(inputs) {
        values.push((Cow::Borrowed(name.as_str()), to_ort(tensor).map_err(failed)?));
    }
    if Instant::now() >= deadline {
        return Err(RunError::Deadline);
    }
    let watching = super::watch::watch(deadline, options.clone());
    let outputs = session.run_with_options(values, options);
    drop(watching);
    let outputs = match outputs {
        Ok(outputs) => outputs,
        Err(_) if Instant::now() >= deadline => return Err(RunError::Deadline),
        Err(e) => return Err(failed(e)),
    };
    let mut total: u64 = 0;
    let mut named = Vec::with_capacity(outputs.len());
    for (name, value) in &outputs {
        let tensor = from_ort(name, &value).map_err(RunError::Failed)?;
        total = total.saturating_add(tensor.data.len() as u64);
        if total > value_bytes {
            return Err(RunError::TooLarge(too_large("(all outputs)", total, value_bytes)));
        }
        named.push(tensor);
    }
    Ok(named)
}

/// A checked input as ONNX Runtime's tensor (its bytes copied once).
fn to_ort(tensor: &Tensor) -> ort::Result<SessionInputValue<'static>> {
    let dims: Vec<i64> = tensor.dimensions.iter().map(|&d| i64::from(d)).collect();
    let data = &tensor.data;
    Ok(match tensor.ty {
        TensorType::Fp32 => typed(dims, data, f32::from_le_bytes)?,
        TensorType::Fp64 => typed(dims, data, f64::from_le_bytes)?,
        TensorType::I32 => typed(dims, data, i32::from_le_bytes)?,
        TensorType::I64 => typed(dims, data, i64::from_le_bytes)?,
        TensorType::U8 => typed(dims, data, u8::from_le_bytes)?,
        // tract's analysis refuses graphs with other input types at load.
        TensorType::Fp16 | TensorType::Bf16 => {
            return Err(ort::Error::new("FP16 and BF16 inputs are not passed to ONNX Runtime"))
        }
    })
}

fn typed<T: PrimitiveTensorElementType + std::fmt::Debug + Clone + 'static, const N: usize>(
    dims: Vec<i64>,
    data: &[u8],
    from: fn([u8; N]) -> T,
) -> ort::Result<SessionInputValue<'static>> {
    let values: Vec<T> = data
        .chunks_exact(N)
        .map(|c| {
            let mut bytes = [0u8; N];
            bytes.copy_from_slice(c);
            from(bytes)
        })
        .collect();
    Ok(OrtTensor::from_array((dims, values))?.into())
}

/// An output as a `wasi:nn` tensor (its bytes copied once).
fn from_ort(name: &str, value: &ort::value::DynValue) -> Result<Tensor, String> {
    let unsupported = || format!("output '{name}' has a type wasi:nn cannot pass: {:?}", value.dtype());
    let ValueType::Tensor { ty, shape, .. } = value.dtype() else {
        return Err(unsupported());
    };
    let dimensions = shape
        .iter()
        .map(|&d| u32::try_from(d).map_err(|_| format!("output '{name}': dimension {d} does not fit wasi:nn's u32")))
        .collect::<Result<Vec<u32>, String>>()?;
    let (ty, data) = match ty {
        TensorElementType::Float32 => (TensorType::Fp32, extracted(name, value, f32::to_le_bytes)?),
        TensorElementType::Float64 => (TensorType::Fp64, extracted(name, value, f64::to_le_bytes)?),
        TensorElementType::Int32 => (TensorType::I32, extracted(name, value, i32::to_le_bytes)?),
        TensorElementType::Int64 => (TensorType::I64, extracted(name, value, i64::to_le_bytes)?),
        TensorElementType::Uint8 => (TensorType::U8, extracted(name, value, u8::to_le_bytes)?),
        _ => return Err(unsupported()),
    };
    Ok(Tensor { dimensions, ty, data })
}

/// The output's elements as little-endian bytes.
fn extracted<T: PrimitiveTensorElementType + Copy, const N: usize>(
    name: &str,
    value: &ort::value::DynValue,
    to: fn(T) -> [u8; N],
) -> Result<Vec<u8>, String> {
    let (_, values) = value
        .try_extract_tensor::<T>()
        .map_err(|e| format!("output '{name}': {e}"))?;
    let mut bytes = Vec::with_capacity(values.len() * N);
    for &v in values {
        bytes.extend_from_slice(&to(v));
    }
    Ok(bytes)
}

/// The tract backend's tests, for this backend: the same limits, checked the same way.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::nn::onnx;
    use crate::runtime::nn::test_support::{
        a_long_compute_stops_at_its_deadline, digits_inputs_are_checked, fp32, later, limits, load_file,
        values_past_the_instance_are_refused, MIB,
    };

    /// Whether the library is there (named for the process); see `onnx::onnxruntime_library`.
    fn onnxruntime() -> bool {
        match onnx::onnxruntime_library() {
            Some(path) => {
                set_library(path);
                true
            }
            None => false,
        }
    }

    fn load_bytes(bytes: &[u8], limits: GraphLimits) -> Result<OrtGraph, Refused> {
        load_file(bytes, limits, |dir, file, limits, budget| {
            OrtGraph::load(dir, file, limits, budget, 1)
        })
    }

    /// The ids of this process's threads named `name` (a thread another makes takes its
    /// name, unless it is given one). Ids, not a count: a thread an earlier session made may
    /// still be ending while the next are counted.
    fn threads_named(name: &str) -> std::collections::BTreeSet<String> {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|task| {
                let task = task.ok()?;
                let comm = std::fs::read_to_string(task.path().join("comm")).ok()?;
                (comm.trim_end() == name).then(|| task.file_name().to_string_lossy().into_owned())
            })
            .collect()
    }

    #[test]
    fn a_graphs_threads_reach_its_sessions() {
        if !onnxruntime() {
            return;
        }
        let bytes = onnx::matmul_chain(8, 256, Some(256));
        let x = || vec![(String::new(), fp32(&[256, 256], &[1.0; 256 * 256]))];
        for threads in [1u32, 3] {
            // On a thread of its own, with a name no other test's threads have: the threads
            // ONNX Runtime makes for the sessions made here take it.
            let name = format!("ort-threads-{threads}");
            let (bytes, named) = (bytes.clone(), name.clone());
            let made = std::thread::Builder::new()
                .name(name)
                .spawn(move || {
                    let load = |threads| {
                        load_file(&bytes, limits(), |dir, file, limits, budget| {
                            OrtGraph::load(dir, file, limits, budget, threads)
                        })
                        .unwrap()
                    };
                    // What the process makes once, whichever thread asks first (ONNX
                    // Runtime's environment starts a thread), made before counting.
                    load(1).run(x(), later(), 64 * MIB).unwrap();
                    let before = threads_named(&named);
                    let graph = load(threads);
                    graph.run(x(), later(), 64 * MIB).unwrap();
                    let first = threads_named(&named).difference(&before).count();
                    // Two computes at once: a second session, with its own threads.
                    let one = graph.session(later()).unwrap();
                    let two = graph.session(later()).unwrap();
                    let other = threads_named(&named).difference(&before).count();
                    graph.give_back(one);
                    graph.give_back(two);
                    let made = lock(&graph.sessions).made;
                    (first, other, made)
                })
                .unwrap()
                .join()
                .unwrap();
            let per_session = threads as usize - 1;
            println!("threads = {threads}: threads made by one session, by two: {made:?}");
            assert_eq!(made, (per_session, 2 * per_session, 2), "threads = {threads}");
        }
        let error = load_file(&bytes, limits(), |dir, file, limits, budget| {
            OrtGraph::load(dir, file, limits, budget, 0)
        })
        .unwrap_err();
        assert!(error.reason.contains("1 to 16 threads"), "{}", error.reason);
    }

    #[test]
    fn the_digits_graph_computes_what_tract_does_and_checks_its_inputs_first() {
        if !onnxruntime() {
            return;
        }
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/models/digits-onnx");
        let file = dir.join("digits.onnx");
        let graph = OrtGraph::load(&dir, &file, &limits(), 256 * MIB, 1).unwrap();
        let tract = super::super::TractGraph::load(&dir, &file, &limits(), 256 * MIB).unwrap();
        assert_eq!(graph.describe_inputs(), "'input-0': FP32 [N, 64]");
        let x: Vec<f32> = (0..3 * 64).map(|i| (i % 17) as f32).collect();
        let ours = graph
            .run(vec![("x".into(), fp32(&[3, 64], &x))], later(), 64 * MIB)
            .unwrap();
        let theirs = tract
            .run(vec![("x".into(), fp32(&[3, 64], &x))], later(), 64 * MIB)
            .unwrap();
        let names: Vec<&str> = ours.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names, ["probabilities", "label"]);
        assert_eq!(ours[1].1, theirs[1].1, "the labels");
        let floats = |t: &Tensor| -> Vec<f32> {
            t.data
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect()
        };
        for (a, b) in floats(&ours[0].1).iter().zip(floats(&theirs[0].1)) {
            assert!((a - b).abs() < 1e-5, "{a} vs tract's {b}");
        }
        digits_inputs_are_checked(&|inputs, deadline, cap| graph.run(inputs, deadline, cap));
    }

    #[test]
    fn load_limits_hold_as_for_tract() {
        if !onnxruntime() {
            return;
        }
        let error = load_bytes(&onnx::constant_of_shape(&[1 << 20, 1 << 20]), limits()).unwrap_err();
        assert_eq!(error.limit, Refusal::Memory, "{}", error.reason);
        let error = load_bytes(&onnx::chain(20_000), limits()).unwrap_err();
        assert_eq!(error.limit, Refusal::Nodes, "{}", error.reason);
        let error = load_bytes(b"\x08\x07garbage\xff\xff", limits()).unwrap_err();
        assert!(error.reason.contains("not a valid ONNX graph"), "{}", error.reason);
        // The session is counted: the weights (4 MiB) twice, and the file.
        let weights = onnx::matmul_chain(1, 1024, None);
        assert!(load_bytes(&weights, limits()).unwrap().bytes() >= 12 * MIB);
        let tight = GraphLimits {
            memory_bytes: 10 * MIB,
            ..limits()
        };
        let error = load_bytes(&weights, tight).unwrap_err();
        assert!(error.reason.contains("limits.graph_memory_mib"), "{}", error.reason);
        // Fixed sizes larger than an instance: refused at load.
        let error = load_bytes(&onnx::matmul_chain(1, 64, Some(1 << 20)), limits()).unwrap_err();
        assert_eq!(error.limit, Refusal::ValueSize, "{}", error.reason);
    }

    #[test]
    fn a_compute_is_terminated_at_its_deadline() {
        if !onnxruntime() {
            return;
        }
        let graph = load_bytes(&onnx::matmul_chain(200, 256, Some(256)), limits()).unwrap();
        a_long_compute_stops_at_its_deadline(&|inputs, deadline, cap| graph.run(inputs, deadline, cap));
    }

    #[test]
    fn values_larger_than_the_instance_are_refused_before_they_are_computed() {
        if !onnxruntime() {
            return;
        }
        let graph = load_bytes(&onnx::widen(65_536), limits()).unwrap();
        values_past_the_instance_are_refused(&|inputs, deadline, cap| graph.run(inputs, deadline, cap));
    }

    #[test]
    fn sessions_are_made_per_concurrent_compute_within_the_graph_memory() {
        if !onnxruntime() {
            return;
        }
        let graph = Arc::new(load_bytes(&onnx::matmul_chain(40, 256, Some(256)), limits()).unwrap());
        let one = graph.bytes();
        let threads: Vec<_> = (0..3)
            .map(|_| {
                let graph = graph.clone();
                std::thread::spawn(move || {
                    let x = vec![(String::new(), fp32(&[256, 256], &[1.0; 256 * 256]))];
                    graph.run(x, later(), 64 * MIB).unwrap();
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        let made = lock(&graph.sessions).made;
        assert!((1..=3).contains(&made), "{made}");
        assert_eq!(graph.bytes(), one + (made - 1) * graph.session_bytes);
    }

    #[test]
    fn computes_past_what_the_sessions_memory_allows_wait_for_one_given_back() {
        if !onnxruntime() {
            return;
        }
        let bytes = onnx::matmul_chain(40, 256, Some(256));
        let roomy = load_bytes(&bytes, limits()).unwrap();
        // Room for the first session and half of a second one.
        let tight = GraphLimits {
            memory_bytes: roomy.bytes() + roomy.session_bytes / 2,
            ..limits()
        };
        let graph = Arc::new(load_bytes(&bytes, tight).unwrap());
        let threads: Vec<_> = (0..3)
            .map(|_| {
                let graph = graph.clone();
                std::thread::spawn(move || {
                    let x = || vec![(String::new(), fp32(&[256, 256], &[1.0; 256 * 256]))];
                    for _ in 0..3 {
                        graph.run(x(), later(), 64 * MIB).unwrap();
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        let sessions = lock(&graph.sessions);
        assert_eq!((sessions.made, sessions.idle.len(), sessions.waiting), (1, 1, 0));
    }
}
