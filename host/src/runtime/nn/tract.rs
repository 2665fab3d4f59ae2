//! The ONNX backend: graphs parsed, optimised and planned by `tract-onnx` once, at load;
//! inputs checked against the graph's declared inputs before each compute.

use std::path::Path;

use super::host::NnTensor as Tensor;
use crate::model::config::graph_path_inside;
use crate::runtime::bindings::nn::tensor::TensorType;
use tract_onnx::prelude::{
    DatumType, Framework, InferenceModelExt, TDim, TValue, Tensor as TractTensor, TypedFact, TypedModel,
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
    /// plans it. The error is the reason, for the model's load error.
    pub fn load(dir: &Path, file: &Path) -> Result<Self, String> {
        let resolved = graph_path_inside(dir, file)?;
        let bytes = crate::model::files::read_regular(&resolved, MAX_GRAPH_BYTES, "the graph size cap of 256 MiB")
            .map_err(|e| e.to_string())?;
        // tract's parser and optimiser on a hostile file: an error, whatever happens.
        let planned = std::panic::catch_unwind(|| Self::plan(&bytes));
        clear_upper_vector_state();
        let planned = planned.map_err(|_| "not a valid ONNX graph (the parser panicked)".to_string())?;
        let (plan, inputs, outputs) = planned?;
        Ok(Self {
            plan,
            inputs,
            outputs,
            bytes: bytes.len() as u64,
        })
    }

    #[allow(clippy::type_complexity)]
    fn plan(bytes: &[u8]) -> Result<(TypedRunnableModel<TypedModel>, Vec<InputSpec>, Vec<String>), String> {
        // `model_for_read` has no folder to resolve external data from, so a graph whose
        // weights live in other files (which could point anywhere) is refused.
        let model = tract_onnx::onnx()
            .model_for_read(&mut &bytes[..])
            .map_err(|e| format!("not a valid ONNX graph: {e:#}"))?;
        let model = model
            .into_optimized()
            .map_err(|e| format!("cannot optimise the graph: {e:#}"))?;
        let mut inputs = Vec::new();
        for (i, outlet) in model.input_outlets().map_err(|e| format!("{e:#}"))?.iter().enumerate() {
            let fact: &TypedFact = model.input_fact(i).map_err(|e| format!("{e:#}"))?;
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
            .map_err(|e| format!("{e:#}"))?
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
                format!(
                    "input '{}' has element type {:?}, which wasi:nn cannot pass (FP16, FP32, FP64, U8, I32, I64)",
                    input.name, input.datum_type
                )
            })?;
        }
        let plan = model
            .into_runnable()
            .map_err(|e| format!("cannot plan the graph: {e:#}"))?;
        Ok((plan, inputs, outputs))
    }

    /// Host memory held: the file's bytes (the plan's constants are of the same order).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The graph's inputs as `name: TYPE [dims]` (`N` for a symbolic dimension).
    pub fn describe_inputs(&self) -> String {
        self.inputs.iter().map(describe).collect::<Vec<_>>().join(", ")
    }

    /// Runs the graph on `inputs` (by name, or in declaration order when unnamed or the
    /// graph has one input), after checking each against its declaration.
    pub fn run(&self, inputs: Vec<NamedTensor>) -> Result<Vec<NamedTensor>, RunError> {
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
        let outputs = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.plan.run(inputs)));
        clear_upper_vector_state();
        let outputs = outputs
            .map_err(|_| RunError::Failed("the graph failed: tract panicked".to_string()))?
            .map_err(|e| RunError::Failed(format!("the graph failed: {e:#}")))?;
        outputs
            .into_iter()
            .zip(&self.outputs)
            .map(|(value, name)| Ok((name.clone(), from_tract(name, &value).map_err(RunError::Failed)?)))
            .collect()
    }
}

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
mod tests {
    use super::*;

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

    fn invalid(result: Result<Vec<NamedTensor>, RunError>) -> String {
        match result {
            Err(RunError::Invalid(message)) => message,
            other => panic!("expected an invalid input, got {other:?}"),
        }
    }

    #[test]
    fn the_digits_graph_runs_and_checks_its_inputs_first() {
        let dir = examples();
        let graph = TractGraph::load(&dir, &dir.join("digits.onnx")).unwrap();
        assert_eq!(graph.describe_inputs(), "'input-0': FP32 [N, 64]");
        assert_eq!(graph.bytes(), std::fs::metadata(dir.join("digits.onnx")).unwrap().len());
        let outputs = graph.run(vec![("x".into(), fp32(&[3, 64], &[1.0; 192]))]).unwrap();
        let names: Vec<&str> = outputs.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names, ["probabilities", "label"]);
        assert_eq!(outputs[0].1.dimensions, [3, 10]);
        assert_eq!(outputs[1].1.ty, TensorType::I64);
        assert_eq!(outputs[1].1.dimensions, [3]);

        let shape = invalid(graph.run(vec![("x".into(), fp32(&[1, 63], &[0.0; 63]))]));
        assert!(shape.contains("shape [1, 63]"), "{shape}");
        let huge = invalid(graph.run(vec![("x".into(), fp32(&[5000, 64], &[]))]));
        assert!(huge.contains("at most 4096"), "{huge}");
        let short = invalid(graph.run(vec![("x".into(), fp32(&[2, 64], &[0.0; 64]))]));
        assert!(short.contains("256 bytes of data"), "{short}");
        let ints = Tensor {
            dimensions: vec![1, 64],
            ty: TensorType::I32,
            data: vec![0; 256],
        };
        let typed = invalid(graph.run(vec![("x".into(), ints)]));
        assert!(typed.contains("element type I32"), "{typed}");
        let none = invalid(graph.run(vec![]));
        assert!(none.contains("takes 1 input(s)"), "{none}");
    }

    #[test]
    fn corrupt_and_oversized_graphs_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("bad.onnx"), b"\x08\x07garbage\xff\xff").unwrap();
        let error = TractGraph::load(dir.path(), &dir.path().join("bad.onnx")).unwrap_err();
        assert!(error.contains("not a valid ONNX graph"), "{error}");
        // Sparse: no disk is used, and the size is refused before a byte is read.
        let big = std::fs::File::create(dir.path().join("big.onnx")).unwrap();
        big.set_len(MAX_GRAPH_BYTES + 1).unwrap();
        let error = TractGraph::load(dir.path(), &dir.path().join("big.onnx")).unwrap_err();
        assert!(error.contains("at most 268435456 bytes"), "{error}");
    }
}
