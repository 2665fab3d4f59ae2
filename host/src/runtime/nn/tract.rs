//! The tract backend: graphs parsed, optimised and planned by `tract-onnx` once, at load,
//! with their symbolic sizes, and again per size computes use ([`super::plans`]).

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use super::budget::{self, GraphLimits, GraphMemory, Refusal, Refused};
use super::host::NnTensor as Tensor;
use super::inputs::{self, InputSpec, NamedTensor, MAX_DYNAMIC_DIM};
use super::plans::{Plan, Plans, SizesKey};
use super::{Computed, RunError};
use crate::model::config::graph_path_inside;
use crate::runtime::bindings::nn::tensor::TensorType;
use tract_onnx::prelude::{
    DatumType, Framework, InferenceModelExt, SimpleState, TDim, TValue, Tensor as TractTensor, TypedFact, TypedModel,
};

/// Largest graph file read; larger files fail the model's load unread.
pub const MAX_GRAPH_BYTES: u64 = 256 << 20;

/// A graph, ready to run any number of times, from any thread.
pub struct TractGraph {
    plans: Plans,
    inputs: Vec<InputSpec>,
    /// Where each symbolic input dimension is: (input, dimension), in input order.
    symbolic: Vec<(usize, usize)>,
    outputs: Vec<String>,
    /// What the symbolic plan and the template of the concrete ones hold.
    bytes: u64,
}

impl std::fmt::Debug for TractGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        inputs::debug_graph(f, "TractGraph", &self.inputs, &self.outputs, self.bytes())
    }
}

impl TractGraph {
    /// Reads `file` (inside `dir`, at most [`MAX_GRAPH_BYTES`]), parses, optimises and
    /// plans it within `limits`, `budget` being what is left of the model's graph memory.
    pub fn load(dir: &Path, file: &Path, limits: &GraphLimits, budget: u64) -> Result<Self, Refused> {
        let bytes = read_graph(dir, file)?;
        // tract's parser and optimiser on a hostile file: an error, whatever happens.
        let planned = std::panic::catch_unwind(move || Self::plan(bytes, limits, budget));
        clear_upper_vector_state();
        planned.map_err(|_| Refused {
            limit: Refusal::Invalid,
            reason: "not a valid ONNX graph (the parser panicked)".to_string(),
        })?
    }

    fn plan(bytes: Vec<u8>, limits: &GraphLimits, budget: u64) -> Result<Self, Refused> {
        let Analysed {
            decluttered,
            inputs,
            outputs,
            symbolic,
        } = analyse(&bytes, limits, budget)?;
        drop(bytes);
        let failed = |reason: String| Refused {
            limit: Refusal::Invalid,
            reason,
        };
        let planning = Instant::now();
        let mut model = decluttered.clone();
        model
            .optimize()
            .map_err(|e| failed(format!("cannot optimise the graph: {e:#}")))?;
        let held = budget::held_bytes(&model);
        if held > budget {
            return Err(Refused {
                limit: Refusal::Memory,
                reason: format!(
                    "the optimised graph holds {held} bytes; the model's graphs may hold at most {budget} bytes (limits.graph_memory_mib)"
                ),
            });
        }
        let guards = budget::value_guards(&model, limits.value_bytes, MAX_DYNAMIC_DIM as i64)?;
        let runnable = model
            .into_runnable()
            .map_err(|e| failed(format!("cannot plan the graph: {e:#}")))?;
        let planning = planning.elapsed();
        let plan = Plan {
            runnable: Arc::new(runnable),
            guards,
        };
        // Concrete plans are made from the decluttered model, kept when it fits the
        // graph memory beside the plan and its sizes are plain symbols (`N`, not `2*N`).
        let template_bytes = budget::held_bytes(&decluttered);
        let symbols = template_symbols(&decluttered, &symbolic);
        let (plans, bytes) = match symbols {
            Some(symbols) if !symbols.is_empty() && held.saturating_add(template_bytes) <= budget => {
                let memory = Arc::new(GraphMemory::new(budget - held - template_bytes));
                let plans = Plans::planned(plan, decluttered, symbols, limits.value_bytes, memory, planning);
                (plans, held + template_bytes)
            }
            _ => (Plans::fixed(plan), held),
        };
        Ok(Self {
            plans,
            inputs,
            symbolic,
            outputs,
            bytes,
        })
    }

    /// Host memory held: the plans' constants (weights, packed or not, and every value
    /// folded at load), and the model concrete plans are made from, in bytes.
    pub fn bytes(&self) -> u64 {
        self.bytes + self.plans.concrete_bytes()
    }

    /// From now on, what this graph's concrete plans hold is taken from `memory`, the
    /// model's graph memory.
    pub fn share_memory(&self, memory: Arc<GraphMemory>) {
        self.plans.share_memory(memory);
    }

    /// The graph's plans.
    pub fn plans(&self) -> &Plans {
        &self.plans
    }

    /// The graph's inputs as `name: TYPE [dims]` (`N` for a symbolic dimension).
    pub fn describe_inputs(&self) -> String {
        inputs::describe_all(&self.inputs)
    }

    /// Runs the graph on `inputs` (by name, or in declaration order when unnamed or the
    /// graph has one input), after checking each against its declaration. The compute
    /// stops between two nodes once `deadline` has passed, and before a node whose
    /// outputs would hold more than `value_bytes` (the instance's memory cap).
    ///
    /// Each compute gets a fresh execution state: measured, making one costs under a
    /// microsecond on the example graphs (keeping one per execution context saved less
    /// than the noise), where a plan made concrete saves half the compute at batch 1.
    pub fn run(&self, inputs: Vec<NamedTensor>, deadline: Instant, value_bytes: u64) -> Computed {
        let inputs = inputs::checked(&self.inputs, inputs)?;
        let sizes: SizesKey = self
            .symbolic
            .iter()
            .map(|&(input, dim)| u64::from(inputs[input].dimensions[dim]))
            .collect();
        let plan = self.plans.for_sizes(&sizes, deadline);
        let values = inputs
            .iter()
            .zip(&self.inputs)
            .map(|(tensor, spec)| to_tract(spec, tensor).map(TValue::from))
            .collect::<Result<_, _>>()
            .map_err(RunError::Invalid)?;
        drop(inputs);
        let outputs = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            compute(&plan, values, deadline, value_bytes)
        }));
        clear_upper_vector_state();
        let outputs = outputs
            .map_err(|_| RunError::Failed("the graph failed: tract panicked".to_string()))?
            .map_err(|e: tract_onnx::prelude::TractError| {
                match e.chain().find_map(|cause| cause.downcast_ref::<Stopped>()) {
                    Some(Stopped::Deadline) => RunError::Deadline,
                    Some(Stopped::TooLarge(message)) => RunError::TooLarge(message.clone()),
                    None => RunError::Failed(format!("the graph failed: {e:#}")),
                }
            })?;
        // What the outputs hold together is copied into the instance's memory next.
        let total: u64 = outputs
            .iter()
            .map(|v| (v.len() as u64).saturating_mul(v.datum_type().size_of() as u64))
            .sum();
        if total > value_bytes {
            return Err(RunError::TooLarge(too_large("(all outputs)", total, value_bytes)));
        }
        outputs
            .iter()
            .zip(&self.outputs)
            .map(|(value, name)| Ok((name.clone(), from_tract(name, value).map_err(RunError::Failed)?)))
            .collect()
    }
}

/// The graph file `file`, inside `dir` (symlinks resolved), at most [`MAX_GRAPH_BYTES`].
pub fn read_graph(dir: &Path, file: &Path) -> Result<Vec<u8>, Refused> {
    let failed = |reason: String| Refused {
        limit: Refusal::Invalid,
        reason,
    };
    let resolved = graph_path_inside(dir, file).map_err(failed)?;
    crate::model::files::read_regular(&resolved, MAX_GRAPH_BYTES, "the graph size cap of 256 MiB")
        .map_err(|e| failed(e.to_string()))
}

/// A graph parsed, checked against the load limits and decluttered: what both backends
/// start from (ONNX Runtime's graphs are analysed by tract too, for the limits).
pub struct Analysed {
    pub decluttered: TypedModel,
    pub inputs: Vec<InputSpec>,
    pub outputs: Vec<String>,
    /// Where each symbolic input dimension is: (input, dimension), in input order.
    pub symbolic: Vec<(usize, usize)>,
}

/// Parses `bytes` and declutters the graph within `limits`, `budget` being what is left
/// of the model's graph memory; a panic of tract's is an invalid graph.
pub fn analyse(bytes: &[u8], limits: &GraphLimits, budget: u64) -> Result<Analysed, Refused> {
    let analysed = std::panic::catch_unwind(|| analyse_unguarded(bytes, limits, budget));
    clear_upper_vector_state();
    analysed.map_err(|_| Refused {
        limit: Refusal::Invalid,
        reason: "not a valid ONNX graph (the parser panicked)".to_string(),
    })?
}

fn analyse_unguarded(bytes: &[u8], limits: &GraphLimits, budget: u64) -> Result<Analysed, Refused> {
    let failed = |reason: String| Refused {
        limit: Refusal::Invalid,
        reason,
    };
    let onnx = tract_onnx::onnx();
    let proto = onnx
        .proto_model_for_read(&mut &bytes[..])
        .map_err(|e| failed(format!("not a valid ONNX graph: {e:#}")))?;
    let declared = budget::check_proto(&proto, limits, budget)?;
    // `model_for_proto_model` has no folder to resolve external data from, so a graph
    // whose weights live in other files (which could point anywhere) is refused.
    let mut model = onnx
        .model_for_proto_model(&proto)
        .map_err(|e| failed(format!("not a valid ONNX graph: {e:#}")))?;
    drop(proto);
    budget::guard_folding(&mut model, declared, budget);
    let refused_fold = |e: tract_onnx::prelude::TractError, what: &str| match e
        .chain()
        .find_map(|cause| cause.downcast_ref::<budget::FoldRefused>())
    {
        Some(refused) => Refused {
            limit: Refusal::Memory,
            reason: refused.0.clone(),
        },
        None => failed(format!("{what}: {e:#}")),
    };
    let model = model
        .into_typed()
        .map_err(|e| refused_fold(e, "cannot analyse the graph"))?;
    budget::check_typed_folding(&model, budget)?;
    let decluttered = model
        .into_decluttered()
        .map_err(|e| failed(format!("cannot optimise the graph: {e:#}")))?;
    budget::check_typed_folding(&decluttered, budget)?;
    let mut inputs = Vec::new();
    for (i, outlet) in decluttered
        .input_outlets()
        .map_err(|e| failed(format!("{e:#}")))?
        .iter()
        .enumerate()
    {
        let fact: &TypedFact = decluttered.input_fact(i).map_err(|e| failed(format!("{e:#}")))?;
        let name = decluttered.node(outlet.node).name.clone();
        let ty = tensor_type(fact.datum_type).ok_or_else(|| {
            failed(format!(
                "input '{name}' has element type {:?}, which wasi:nn cannot pass (FP16, FP32, FP64, U8, I32, I64)",
                fact.datum_type
            ))
        })?;
        let dims = fact
            .shape
            .iter()
            .map(|d: &TDim| d.to_i64().ok().and_then(|v| u64::try_from(v).ok()))
            .collect();
        inputs.push(InputSpec { name, ty, dims });
    }
    let outputs = decluttered
        .output_outlets()
        .map_err(|e| failed(format!("{e:#}")))?
        .iter()
        .map(|&outlet| {
            decluttered
                .outlet_label(outlet)
                .map(str::to_owned)
                .unwrap_or_else(|| decluttered.node(outlet.node).name.clone())
        })
        .collect();
    let symbolic: Vec<(usize, usize)> = inputs
        .iter()
        .enumerate()
        .flat_map(|(i, spec)| {
            spec.dims
                .iter()
                .enumerate()
                .filter(|(_, d)| d.is_none())
                .map(move |(d, _)| (i, d))
        })
        .collect();
    Ok(Analysed {
        decluttered,
        inputs,
        outputs,
        symbolic,
    })
}

/// The symbol of each symbolic input dimension at `positions` of `model`, `None` when one
/// is an expression rather than a symbol.
pub fn template_symbols(model: &TypedModel, positions: &[(usize, usize)]) -> Option<Vec<tract_onnx::prelude::Symbol>> {
    positions
        .iter()
        .map(|&(input, dim)| match model.input_fact(input).ok()?.shape.get(dim)? {
            TDim::Sym(symbol) => Some(symbol.clone()),
            _ => None,
        })
        .collect()
}

/// tract's plan, node by node: the clock is read before each node (a node's own cost is
/// bounded by the input caps), and a node whose outputs could be too large for the
/// instance ([`budget::value_guards`]) has their size checked before it runs.
fn compute(
    plan: &Plan,
    inputs: tract_onnx::prelude::TVec<TValue>,
    deadline: Instant,
    value_bytes: u64,
) -> tract_onnx::prelude::TractResult<tract_onnx::prelude::TVec<TValue>> {
    let mut state = SimpleState::new(&*plan.runnable)?;
    state.run_plan_with_eval(inputs, |session, op_state, node, inputs| {
        if Instant::now() >= deadline {
            return Err(anyhow::Error::new(Stopped::Deadline));
        }
        if let Some(Some(bytes)) = plan.guards.get(node.id) {
            let bytes = bytes.eval(&session.resolved_symbols).to_i64().map(|b| b as u64);
            match bytes {
                Ok(bytes) if bytes <= value_bytes => {}
                Ok(bytes) => {
                    return Err(anyhow::Error::new(Stopped::TooLarge(too_large(
                        &node.name,
                        bytes,
                        value_bytes,
                    ))))
                }
                // Sizes only known once computed are checked just after.
                Err(_) => {}
            }
        }
        let outputs = tract_onnx::tract_core::plan::eval(session, op_state, node, inputs)?;
        let bytes: u64 = outputs
            .iter()
            .map(|v| (v.len() as u64).saturating_mul(v.datum_type().size_of() as u64))
            .sum();
        if bytes > value_bytes {
            return Err(anyhow::Error::new(Stopped::TooLarge(too_large(
                &node.name,
                bytes,
                value_bytes,
            ))));
        }
        Ok(outputs)
    })
}

pub fn too_large(node: &str, bytes: u64, value_bytes: u64) -> String {
    format!(
        "the graph failed: node '{}' would compute {bytes} bytes, more than the instance's memory of {value_bytes} bytes (limits.memory_mib)",
        crate::model::text::clip(node)
    )
}

/// Why tract's plan was stopped from inside (see [`compute`]).
#[derive(Debug)]
enum Stopped {
    Deadline,
    TooLarge(String),
}

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stopped::Deadline => f.write_str("stopped at the call's deadline"),
            Stopped::TooLarge(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for Stopped {}

/// tract's x86_64 kernels (AVX/FMA assembly) return with the upper halves of the YMM
/// registers dirty, and every SSE instruction that runs next on this thread (Cranelift's
/// wasm SIMD in the other stages, the host's own code) then pays a state-transition
/// penalty: measured, the hand-written digits wasm forward pass at batch 32 went from
/// 25 µs to 2.6 ms once tract had run on its thread. `vzeroupper` clears that state.
pub fn clear_upper_vector_state() {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx") {
        // SAFETY: the CPU has AVX (checked just above), which is all `zero_upper` needs.
        unsafe { zero_upper() }
    }
}

/// `vzeroupper`: zeroes bits 128 and up of the vector registers, which hold no live
/// value between two Rust statements.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
fn zero_upper() {
    std::arch::x86_64::_mm256_zeroupper();
}

fn tensor_type(datum_type: DatumType) -> Option<TensorType> {
    Some(match datum_type {
        DatumType::F16 => TensorType::Fp16,
        DatumType::F32 => TensorType::Fp32,
        DatumType::F64 => TensorType::Fp64,
        DatumType::U8 => TensorType::U8,
        DatumType::I32 => TensorType::I32,
        DatumType::I64 => TensorType::I64,
        _ => return None,
    })
}

fn datum_type(ty: TensorType) -> Option<DatumType> {
    Some(match ty {
        TensorType::Fp16 => DatumType::F16,
        TensorType::Fp32 => DatumType::F32,
        TensorType::Fp64 => DatumType::F64,
        TensorType::U8 => DatumType::U8,
        TensorType::I32 => DatumType::I32,
        TensorType::I64 => DatumType::I64,
        TensorType::Bf16 => return None,
    })
}

/// A checked input as tract's tensor: its bytes copied once, into tract's aligned buffer
/// (`wasi:nn` data is little-endian, as this host is).
fn to_tract(spec: &InputSpec, tensor: &Tensor) -> Result<TractTensor, String> {
    let dt = datum_type(tensor.ty).ok_or_else(|| format!("invalid input '{}': element type BF16", spec.name))?;
    let shape: tract_onnx::prelude::TVec<usize> = tensor.dimensions.iter().map(|&d| d as usize).collect();
    let mut value = TractTensor::zero_dt(dt, &shape).map_err(|e| format!("invalid input '{}': {e:#}", spec.name))?;
    value.as_bytes_mut().copy_from_slice(&tensor.data);
    Ok(value)
}

/// An output as a `wasi:nn` tensor, its bytes copied once.
fn from_tract(name: &str, value: &TractTensor) -> Result<Tensor, String> {
    let ty = tensor_type(value.datum_type()).ok_or_else(|| {
        format!(
            "output '{name}' has element type {:?}, which wasi:nn cannot pass",
            value.datum_type()
        )
    })?;
    let dimensions = value
        .shape()
        .iter()
        .map(|&d| u32::try_from(d).map_err(|_| format!("output '{name}': dimension {d} does not fit wasi:nn's u32")))
        .collect::<Result<Vec<u32>, String>>()?;
    Ok(Tensor {
        dimensions,
        ty,
        data: value.as_bytes().to_vec(),
    })
}

#[cfg(not(target_endian = "little"))]
compile_error!("wasi:nn tensors are little-endian: tensorplug copies them as they are");

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::nn::onnx;
    use crate::runtime::nn::test_support::{
        a_long_compute_stops_at_its_deadline, digits_inputs_are_checked, fp32, later, limits, load_file,
        values_past_the_instance_are_refused, MIB,
    };
    use crate::runtime::nn::{MAX_CONCRETE_PLANS, MAX_PLANNED_DIM};
    use std::time::Duration;

    fn examples() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/models/digits-onnx")
    }

    /// Loads `bytes` as a graph under `limits`.
    fn load_bytes(bytes: &[u8], limits: GraphLimits) -> Result<TractGraph, Refused> {
        load_file(bytes, limits, TractGraph::load)
    }

    fn refused(bytes: &[u8], limits: GraphLimits) -> Refused {
        match load_bytes(bytes, limits) {
            Ok(graph) => panic!("loaded, holding {} bytes", graph.bytes()),
            Err(refused) => refused,
        }
    }

    #[test]
    fn the_digits_graph_runs_and_checks_its_inputs_first() {
        let dir = examples();
        let graph = TractGraph::load(&dir, &dir.join("digits.onnx"), &limits(), 256 * MIB).unwrap();
        assert_eq!(graph.describe_inputs(), "'input-0': FP32 [N, 64]");
        // The weights (64x32 and 32x10 FP32, packed) and biases: about the file's size.
        let file = std::fs::metadata(dir.join("digits.onnx")).unwrap().len();
        assert!(
            graph.bytes() > file / 2 && graph.bytes() < 4 * file,
            "{} vs {file}",
            graph.bytes()
        );
        let outputs = graph
            .run(vec![("x".into(), fp32(&[3, 64], &[1.0; 192]))], later(), 64 * MIB)
            .unwrap();
        let names: Vec<&str> = outputs.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names, ["probabilities", "label"]);
        assert_eq!(outputs[0].1.dimensions, [3, 10]);
        assert_eq!(outputs[1].1.ty, TensorType::I64);
        assert_eq!(outputs[1].1.dimensions, [3]);

        digits_inputs_are_checked(&|inputs, deadline, cap| graph.run(inputs, deadline, cap));
    }

    #[test]
    fn sizes_in_use_get_concrete_plans_a_few_per_graph_within_the_graph_memory() {
        let dir = examples();
        let graph = TractGraph::load(&dir, &dir.join("digits.onnx"), &limits(), 256 * MIB).unwrap();
        let at_load = graph.bytes();
        let run = |rows: u32| {
            let x = fp32(&[rows, 64], &vec![3.0; rows as usize * 64]);
            let outputs = graph.run(vec![("x".into(), x)], later(), 64 * MIB).unwrap();
            outputs[0].1.data.clone()
        };
        // Past MAX_PLANNED_DIM, on the symbolic plan.
        let symbolic = run(MAX_PLANNED_DIM as u32 + 1);
        assert_eq!(graph.plans().planned_sizes(), 0);
        assert_eq!(graph.bytes(), at_load);
        let concrete = run(3);
        assert_eq!(graph.plans().planned_sizes(), 1);
        assert!(graph.bytes() > at_load, "{} vs {at_load}", graph.bytes());
        let close = symbolic[..concrete.len()]
            .chunks_exact(4)
            .zip(concrete.chunks_exact(4))
            .all(|(a, b)| {
                let (a, b) = (
                    f32::from_le_bytes(a.try_into().unwrap()),
                    f32::from_le_bytes(b.try_into().unwrap()),
                );
                (a - b).abs() < 1e-5
            });
        assert!(close, "the concrete plan computes what the symbolic one does");
        // A client sending every size gets a few planned; the rest run, unplanned.
        for rows in 1..=40 {
            run(rows);
        }
        assert_eq!(graph.plans().planned_sizes(), MAX_CONCRETE_PLANS);
        let full = graph.bytes();
        run(MAX_PLANNED_DIM as u32 + 1);
        run(39);
        assert_eq!(graph.bytes(), full);
        assert_eq!(graph.plans().planned_sizes(), MAX_CONCRETE_PLANS);

        // With no graph memory to spare, sizes stay on the symbolic plan.
        let tight = TractGraph::load(&dir, &dir.join("digits.onnx"), &limits(), at_load + 1024).unwrap();
        let x = fp32(&[2, 64], &[1.0; 128]);
        tight.run(vec![("x".into(), x)], later(), 64 * MIB).unwrap();
        assert_eq!(tight.bytes(), at_load);
    }

    #[test]
    fn corrupt_and_oversized_graphs_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("bad.onnx"), b"\x08\x07garbage\xff\xff").unwrap();
        let error = TractGraph::load(dir.path(), &dir.path().join("bad.onnx"), &limits(), 256 * MIB).unwrap_err();
        assert!(error.reason.contains("not a valid ONNX graph"), "{}", error.reason);
        // Sparse: no disk is used, and the size is refused before a byte is read.
        let big = std::fs::File::create(dir.path().join("big.onnx")).unwrap();
        big.set_len(MAX_GRAPH_BYTES + 1).unwrap();
        let error = TractGraph::load(dir.path(), &dir.path().join("big.onnx"), &limits(), 256 * MIB).unwrap_err();
        assert!(error.reason.contains("at most 268435456 bytes"), "{}", error.reason);
    }

    /// Each bomb is a few hundred bytes describing 4 TiB (or 512 MiB); refused before
    /// tract allocates it, so the test process would not survive otherwise.
    #[test]
    fn graph_bombs_are_refused_before_their_constants_exist() {
        let huge = [1 << 20, 1 << 20];
        for (what, bytes) in [
            ("ConstantOfShape", onnx::constant_of_shape(&huge)),
            ("Expand", onnx::expand(&huge)),
            ("Range", onnx::range(1 << 40)),
            ("a hollow initializer", onnx::hollow_initializer(&huge)),
            ("a 512 MiB ConstantOfShape", onnx::constant_of_shape(&[128 << 20])),
        ] {
            assert!(bytes.len() < 400, "{what}: {} bytes", bytes.len());
            let started = Instant::now();
            let error = refused(&bytes, limits());
            assert_eq!(error.limit, Refusal::Memory, "{what}: {}", error.reason);
            assert!(
                error.reason.contains("limits.graph_memory_mib"),
                "{what}: {}",
                error.reason
            );
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "{what}: {:?}",
                started.elapsed()
            );
        }
    }

    #[test]
    fn what_a_graph_holds_is_its_folded_constants_and_is_capped() {
        // 16 MiB folded at load from a graph of ~200 bytes: counted, not the file's size.
        let bytes = onnx::constant_of_shape(&[4 << 20]);
        let graph = load_bytes(&bytes, limits()).unwrap();
        assert!(graph.bytes() >= 16 * MIB, "{}", graph.bytes());
        assert!(graph.bytes() < 20 * MIB, "{}", graph.bytes());
        let tight = GraphLimits {
            memory_bytes: 8 * MIB,
            ..limits()
        };
        assert_eq!(refused(&bytes, tight).limit, Refusal::Memory);
        // Weights in the file count too.
        let weights = onnx::matmul_chain(1, 1024, None);
        assert!(load_bytes(&weights, limits()).unwrap().bytes() >= 4 * MIB);
        let error = refused(
            &weights,
            GraphLimits {
                memory_bytes: 2 * MIB,
                ..limits()
            },
        );
        assert!(error.reason.contains("limits.graph_memory_mib"), "{}", error.reason);
    }

    #[test]
    fn graphs_with_too_many_nodes_are_refused_unparsed() {
        let bytes = onnx::chain(20_000);
        let started = Instant::now();
        let error = refused(&bytes, limits());
        assert_eq!(error.limit, Refusal::Nodes);
        assert!(
            error.reason.contains("20001 nodes") && error.reason.contains("limits.graph_max_nodes"),
            "{}",
            error.reason
        );
        assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
        let graph = load_bytes(&onnx::chain(100), limits()).unwrap();
        let outputs = graph.run(
            vec![(
                String::new(),
                fp32(&[2, 4], &[-1.0, 2.0, -3.0, 4.0, 0.0, 1.0, 2.0, 3.0]),
            )],
            later(),
            MIB,
        );
        assert_eq!(outputs.unwrap()[0].1.dimensions, [2, 4]);
    }

    #[test]
    fn a_compute_stops_between_nodes_at_its_deadline() {
        let graph = load_bytes(&onnx::matmul_chain(200, 256, Some(256)), limits()).unwrap();
        a_long_compute_stops_at_its_deadline(&|inputs, deadline, cap| graph.run(inputs, deadline, cap));
    }

    #[test]
    fn values_larger_than_the_instance_are_refused_before_they_are_computed() {
        let graph = load_bytes(&onnx::widen(65_536), limits()).unwrap();
        values_past_the_instance_are_refused(&|inputs, deadline, cap| graph.run(inputs, deadline, cap));
        // Fixed sizes larger than an instance: refused at load.
        let fixed = onnx::matmul_chain(1, 64, Some(1 << 20));
        let error = refused(
            &fixed,
            GraphLimits {
                value_bytes: 64 * MIB,
                ..limits()
            },
        );
        assert_eq!(error.limit, Refusal::ValueSize, "{}", error.reason);
    }
}
