//! The ONNX backend: graphs parsed, optimised and planned by `tract-onnx` once, at load;
//! inputs checked against the graph's declared inputs before each compute.

use std::path::Path;
use std::time::Instant;

use super::budget::{self, GraphLimits, Refusal, Refused};

use super::host::NnTensor as Tensor;
use crate::model::config::graph_path_inside;
use crate::runtime::bindings::nn::tensor::TensorType;
use tract_onnx::prelude::{
    DatumType, Framework, InferenceModelExt, SimpleState, TDim, TValue, Tensor as TractTensor, TypedFact, TypedModel,
    TypedRunnableModel,
};

/// Largest graph file read; larger files fail the model's load unread.
pub const MAX_GRAPH_BYTES: u64 = 256 << 20;

/// Largest value a symbolic dimension (e.g. the batch size `N`) may take in one compute:
/// with fixed sizes elsewhere, it bounds what one compute may allocate.
pub const MAX_DYNAMIC_DIM: u64 = 4096;

/// Most elements of one input tensor (64 Mi, 256 MiB of FP32).
const MAX_INPUT_ELEMENTS: u64 = 64 << 20;

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

/// One named tensor, in or out.
pub type NamedTensor = (String, Tensor);

/// One declared input of a graph.
#[derive(Debug)]
struct InputSpec {
    name: String,
    datum_type: DatumType,
    /// `Some(size)` for a fixed dimension, `None` for a symbolic one.
    dims: Vec<Option<u64>>,
}

/// A graph, ready to run any number of times, from any thread.
pub struct TractGraph {
    plan: TypedRunnableModel<TypedModel>,
    inputs: Vec<InputSpec>,
    outputs: Vec<String>,
    bytes: u64,
    /// Per node, the bytes its outputs hold, where they could pass an instance's memory.
    guards: Vec<Option<TDim>>,
}

impl std::fmt::Debug for TractGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TractGraph")
            .field("inputs", &self.inputs)
            .field("outputs", &self.outputs)
            .field("bytes", &self.bytes)
            .finish()
    }
}

impl TractGraph {
    /// Reads `file` (inside `dir`, at most [`MAX_GRAPH_BYTES`]), parses, optimises and
    /// plans it within `limits`, `budget` being what is left of the model's graph memory.
    pub fn load(dir: &Path, file: &Path, limits: &GraphLimits, budget: u64) -> Result<Self, Refused> {
        let failed = |reason: String| Refused {
            limit: Refusal::Invalid,
            reason,
        };
        let resolved = graph_path_inside(dir, file).map_err(failed)?;
        let bytes = crate::model::files::read_regular(&resolved, MAX_GRAPH_BYTES, "the graph size cap of 256 MiB")
            .map_err(|e| failed(e.to_string()))?;
        // tract's parser and optimiser on a hostile file: an error, whatever happens.
        let planned = std::panic::catch_unwind(|| Self::plan(bytes, limits, budget));
        clear_upper_vector_state();
        planned.map_err(|_| failed("not a valid ONNX graph (the parser panicked)".to_string()))?
    }

    fn plan(bytes: Vec<u8>, limits: &GraphLimits, budget: u64) -> Result<Self, Refused> {
        let failed = |reason: String| Refused {
            limit: Refusal::Invalid,
            reason,
        };
        let onnx = tract_onnx::onnx();
        let proto = onnx
            .proto_model_for_read(&mut &bytes[..])
            .map_err(|e| failed(format!("not a valid ONNX graph: {e:#}")))?;
        drop(bytes);
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
        let mut model = model
            .into_decluttered()
            .map_err(|e| failed(format!("cannot optimise the graph: {e:#}")))?;
        budget::check_typed_folding(&model, budget)?;
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
        let mut inputs = Vec::new();
        for (i, outlet) in model
            .input_outlets()
            .map_err(|e| failed(format!("{e:#}")))?
            .iter()
            .enumerate()
        {
            let fact: &TypedFact = model.input_fact(i).map_err(|e| failed(format!("{e:#}")))?;
            let dims = fact
                .shape
                .iter()
                .map(|d: &TDim| d.to_i64().ok().and_then(|v| u64::try_from(v).ok()))
                .collect();
            inputs.push(InputSpec {
                name: model.node(outlet.node).name.clone(),
                datum_type: fact.datum_type,
                dims,
            });
        }
        let outputs = model
            .output_outlets()
            .map_err(|e| failed(format!("{e:#}")))?
            .iter()
            .map(|&outlet| {
                model
                    .outlet_label(outlet)
                    .map(str::to_owned)
                    .unwrap_or_else(|| model.node(outlet.node).name.clone())
            })
            .collect();
        for input in &inputs {
            tensor_type(input.datum_type).ok_or_else(|| {
                failed(format!(
                    "input '{}' has element type {:?}, which wasi:nn cannot pass (FP16, FP32, FP64, U8, I32, I64)",
                    input.name, input.datum_type
                ))
            })?;
        }
        let plan = model
            .into_runnable()
            .map_err(|e| failed(format!("cannot plan the graph: {e:#}")))?;
        Ok(Self {
            plan,
            inputs,
            outputs,
            bytes: held,
            guards,
        })
    }

    /// Host memory held: the plan's constants (weights, packed or not, and every value
    /// folded at load), in bytes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The graph's inputs as `name: TYPE [dims]` (`N` for a symbolic dimension).
    pub fn describe_inputs(&self) -> String {
        self.inputs.iter().map(describe).collect::<Vec<_>>().join(", ")
    }

    /// Runs the graph on `inputs` (by name, or in declaration order when unnamed or the
    /// graph has one input), after checking each against its declaration. The compute
    /// stops between two nodes once `deadline` has passed, and before a node whose
    /// outputs would hold more than `value_bytes` (the instance's memory cap).
    pub fn run(
        &self,
        inputs: Vec<NamedTensor>,
        deadline: Instant,
        value_bytes: u64,
    ) -> Result<Vec<NamedTensor>, RunError> {
        if inputs.len() != self.inputs.len() {
            return Err(RunError::Invalid(format!(
                "invalid input: the graph takes {} input(s) ({}), got {}",
                self.inputs.len(),
                self.describe_inputs(),
                inputs.len()
            )));
        }
        let mut ordered: Vec<Option<TValue>> = vec![None; self.inputs.len()];
        for (position, (name, tensor)) in inputs.into_iter().enumerate() {
            let index = if self.inputs.len() == 1 {
                0
            } else if name.is_empty() {
                position
            } else {
                self.inputs.iter().position(|s| s.name == name).ok_or_else(|| {
                    RunError::Invalid(format!(
                        "invalid input: the graph has no input '{}' (its inputs: {})",
                        crate::model::text::clip(&name),
                        self.describe_inputs()
                    ))
                })?
            };
            let spec = &self.inputs[index];
            if ordered[index].is_some() {
                return Err(RunError::Invalid(format!("invalid input: '{}' given twice", spec.name)));
            }
            ordered[index] = Some(to_tract(spec, &tensor).map_err(RunError::Invalid)?.into());
        }
        let inputs = ordered.into_iter().flatten().collect();
        let outputs = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.compute(inputs, deadline, value_bytes)
        }));
        clear_upper_vector_state();
        let outputs = outputs
            .map_err(|_| RunError::Failed("the graph failed: tract panicked".to_string()))?
            .map_err(|e| match e.chain().find_map(|cause| cause.downcast_ref::<Stopped>()) {
                Some(Stopped::Deadline) => RunError::Deadline,
                Some(Stopped::TooLarge(message)) => RunError::TooLarge(message.clone()),
                None => RunError::Failed(format!("the graph failed: {e:#}")),
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
            .into_iter()
            .zip(&self.outputs)
            .map(|(value, name)| Ok((name.clone(), from_tract(name, &value).map_err(RunError::Failed)?)))
            .collect()
    }

    /// tract's plan, node by node: the clock is read before each node (a node's own
    /// cost is bounded by the input caps), and a node whose outputs could be too large
    /// for the instance ([`budget::value_guards`]) has their size checked before it runs.
    fn compute(
        &self,
        inputs: tract_onnx::prelude::TVec<TValue>,
        deadline: Instant,
        value_bytes: u64,
    ) -> tract_onnx::prelude::TractResult<tract_onnx::prelude::TVec<TValue>> {
        let mut state = SimpleState::new(&self.plan)?;
        state.run_plan_with_eval(inputs, |session, op_state, node, inputs| {
            if Instant::now() >= deadline {
                return Err(anyhow::Error::new(Stopped::Deadline));
            }
            if let Some(Some(bytes)) = self.guards.get(node.id) {
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
}

fn too_large(node: &str, bytes: u64, value_bytes: u64) -> String {
    format!(
        "the graph failed: node '{}' would compute {bytes} bytes, more than the instance's memory of {value_bytes} bytes (limits.memory_mib)",
        crate::model::text::clip(node)
    )
}

/// Why tract's plan was stopped from inside (see [`TractGraph::compute`]).
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
fn clear_upper_vector_state() {
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

fn describe(spec: &InputSpec) -> String {
    let dims: Vec<String> = spec
        .dims
        .iter()
        .map(|d| d.map_or_else(|| "N".to_string(), |v| v.to_string()))
        .collect();
    let ty = tensor_type(spec.datum_type).map_or_else(|| format!("{:?}", spec.datum_type), |t| type_name(t).into());
    format!("'{}': {ty} [{}]", spec.name, dims.join(", "))
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

/// A `wasi:nn` element type as its WIT spelling.
fn type_name(ty: TensorType) -> &'static str {
    match ty {
        TensorType::Fp16 => "FP16",
        TensorType::Fp32 => "FP32",
        TensorType::Fp64 => "FP64",
        TensorType::Bf16 => "BF16",
        TensorType::U8 => "U8",
        TensorType::I32 => "I32",
        TensorType::I64 => "I64",
    }
}

fn element_bytes(ty: TensorType) -> u64 {
    match ty {
        TensorType::Fp16 | TensorType::Bf16 => 2,
        TensorType::Fp32 | TensorType::I32 => 4,
        TensorType::Fp64 | TensorType::I64 => 8,
        TensorType::U8 => 1,
    }
}

/// Checks `tensor` against `spec` and converts it, with no allocation beyond the tensor's
/// own size.
fn to_tract(spec: &InputSpec, tensor: &Tensor) -> Result<TractTensor, String> {
    let invalid = |what: String| {
        Err(format!(
            "invalid input '{}': {what}; the graph declares {}",
            spec.name,
            describe(spec)
        ))
    };
    if tensor_type(spec.datum_type) != Some(tensor.ty) {
        return invalid(format!("element type {}", type_name(tensor.ty)));
    }
    if tensor.dimensions.len() != spec.dims.len() {
        return invalid(format!("shape {:?}", tensor.dimensions));
    }
    let mut elements: u64 = 1;
    for (&got, want) in tensor.dimensions.iter().zip(&spec.dims) {
        let got = u64::from(got);
        match want {
            Some(size) if *size != got => return invalid(format!("shape {:?}", tensor.dimensions)),
            None if got > MAX_DYNAMIC_DIM => {
                return invalid(format!(
                    "shape {:?} (a variable dimension may be at most {MAX_DYNAMIC_DIM})",
                    tensor.dimensions
                ))
            }
            _ => {}
        }
        elements = elements.saturating_mul(got);
    }
    if elements > MAX_INPUT_ELEMENTS {
        return invalid(format!("{elements} elements, more than {MAX_INPUT_ELEMENTS}"));
    }
    let expected = elements * element_bytes(tensor.ty);
    if tensor.data.len() as u64 != expected {
        return invalid(format!(
            "{} bytes of data for shape {:?} ({expected} expected)",
            tensor.data.len(),
            tensor.dimensions
        ));
    }
    let shape: Vec<usize> = tensor.dimensions.iter().map(|&d| d as usize).collect();
    let data = &tensor.data;
    let built = match spec.datum_type {
        DatumType::F16 => {
            let values: Vec<tract_onnx::prelude::f16> = data
                .chunks_exact(2)
                .map(|c| tract_onnx::prelude::f16::from_bits(u16::from_le_bytes([c[0], c[1]])))
                .collect();
            TractTensor::from_shape(&shape, &values)
        }
        DatumType::F32 => TractTensor::from_shape(&shape, &le::<4, f32>(data, f32::from_le_bytes)),
        DatumType::F64 => TractTensor::from_shape(&shape, &le::<8, f64>(data, f64::from_le_bytes)),
        DatumType::U8 => TractTensor::from_shape(&shape, data),
        DatumType::I32 => TractTensor::from_shape(&shape, &le::<4, i32>(data, i32::from_le_bytes)),
        DatumType::I64 => TractTensor::from_shape(&shape, &le::<8, i64>(data, i64::from_le_bytes)),
        other => return invalid(format!("element type {other:?}")),
    };
    built.map_err(|e| format!("invalid input '{}': {e:#}", spec.name))
}

/// Little-endian elements of `N` bytes.
fn le<const N: usize, T>(data: &[u8], from: fn([u8; N]) -> T) -> Vec<T> {
    data.chunks_exact(N)
        .map(|c| {
            let mut bytes = [0u8; N];
            bytes.copy_from_slice(c);
            from(bytes)
        })
        .collect()
}

/// An output as a `wasi:nn` tensor.
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
    let data = match value.datum_type() {
        DatumType::F16 => slice_bytes::<tract_onnx::prelude::f16, 2>(value, |v| v.to_bits().to_le_bytes())?,
        DatumType::F32 => slice_bytes::<f32, 4>(value, f32::to_le_bytes)?,
        DatumType::F64 => slice_bytes::<f64, 8>(value, f64::to_le_bytes)?,
        DatumType::U8 => slice_bytes::<u8, 1>(value, |v| [v])?,
        DatumType::I32 => slice_bytes::<i32, 4>(value, i32::to_le_bytes)?,
        DatumType::I64 => slice_bytes::<i64, 8>(value, i64::to_le_bytes)?,
        other => return Err(format!("output '{name}': element type {other:?}")),
    };
    Ok(Tensor { dimensions, ty, data })
}

fn slice_bytes<T: tract_onnx::prelude::Datum + Copy, const N: usize>(
    value: &TractTensor,
    to: fn(T) -> [u8; N],
) -> Result<Vec<u8>, String> {
    let values = value.as_slice::<T>().map_err(|e| format!("{e:#}"))?;
    Ok(values.iter().flat_map(|&v| to(v)).collect())
}

#[cfg(test)]
#[path = "../../../../tests/common/onnx.rs"]
mod onnx;

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const MIB: u64 = 1 << 20;

    fn limits() -> GraphLimits {
        GraphLimits {
            memory_bytes: 256 * MIB,
            max_nodes: 10_000,
            value_bytes: 64 * MIB,
        }
    }

    fn examples() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/models/digits-onnx")
    }

    fn fp32(dimensions: &[u32], values: &[f32]) -> Tensor {
        Tensor {
            dimensions: dimensions.to_vec(),
            ty: TensorType::Fp32,
            data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        }
    }

    fn later() -> Instant {
        Instant::now() + Duration::from_secs(60)
    }

    fn invalid(result: Result<Vec<NamedTensor>, RunError>) -> String {
        match result {
            Err(RunError::Invalid(message)) => message,
            other => panic!("expected an invalid input, got {other:?}"),
        }
    }

    /// Loads `bytes` as a graph under `limits`.
    fn load_bytes(bytes: &[u8], limits: GraphLimits) -> Result<TractGraph, Refused> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("g.onnx"), bytes).unwrap();
        TractGraph::load(dir.path(), &dir.path().join("g.onnx"), &limits, limits.memory_bytes)
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

        let run = |tensor| graph.run(vec![("x".into(), tensor)], later(), 64 * MIB);
        let shape = invalid(run(fp32(&[1, 63], &[0.0; 63])));
        assert!(shape.contains("shape [1, 63]"), "{shape}");
        let huge = invalid(run(fp32(&[5000, 64], &[])));
        assert!(huge.contains("at most 4096"), "{huge}");
        let short = invalid(run(fp32(&[2, 64], &[0.0; 64])));
        assert!(short.contains("256 bytes of data"), "{short}");
        let ints = Tensor {
            dimensions: vec![1, 64],
            ty: TensorType::I32,
            data: vec![0; 256],
        };
        let typed = invalid(run(ints));
        assert!(typed.contains("element type I32"), "{typed}");
        let none = invalid(graph.run(vec![], later(), 64 * MIB));
        assert!(none.contains("takes 1 input(s)"), "{none}");
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
        let x = || vec![(String::new(), fp32(&[256, 256], &[1.0; 256 * 256]))];
        let started = Instant::now();
        let whole = graph.run(x(), later(), 64 * MIB).unwrap();
        let full = started.elapsed();
        assert_eq!(whole[0].1.dimensions, [256, 256]);
        let deadline = Instant::now() + full / 4;
        let outcome = graph.run(x(), deadline, 64 * MIB);
        let late = Instant::now().saturating_duration_since(deadline);
        assert!(matches!(outcome, Err(RunError::Deadline)), "{outcome:?}");
        // One 256x256 MatMul takes a few milliseconds; without the check it would end
        // 3/4 of a run late. (Lenient: the tests share two cores with other builds.)
        assert!(late < full / 2, "stopped {late:?} late (a whole run: {full:?})");
    }

    #[test]
    fn values_larger_than_the_instance_are_refused_before_they_are_computed() {
        // [N, 1] x [1, 65536]: 256 KiB per row, so 1024 rows would be 256 MiB.
        let graph = load_bytes(&onnx::widen(65_536), limits()).unwrap();
        let ones = |rows: u32| vec![(String::new(), fp32(&[rows, 1], &vec![1.0; rows as usize]))];
        assert_eq!(
            graph.run(ones(4), later(), 64 * MIB).unwrap()[0].1.dimensions,
            [4, 65_536]
        );
        match graph.run(ones(1024), later(), 64 * MIB) {
            Err(RunError::TooLarge(message)) => {
                assert!(
                    message.contains("268435456 bytes") && message.contains("limits.memory_mib"),
                    "{message}"
                )
            }
            other => panic!("{other:?}"),
        }
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
