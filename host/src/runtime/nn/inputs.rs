//! A graph's declared inputs, and the checks every compute's inputs pass before a
//! backend sees them: the count, names, element types, ranks, fixed sizes, symbolic sizes
//! at most [`MAX_DYNAMIC_DIM`], and the data's length. Backend-neutral: each backend
//! describes its graph's inputs as [`InputSpec`]s at load.

use super::host::NnTensor as Tensor;
use super::RunError;
use crate::runtime::bindings::nn::tensor::TensorType;

/// Largest value a symbolic dimension (e.g. the batch size `N`) may take in one compute:
/// with fixed sizes elsewhere, it bounds what one compute may allocate.
pub const MAX_DYNAMIC_DIM: u64 = 4096;

/// Most elements of one input tensor (64 Mi, 256 MiB of FP32).
const MAX_INPUT_ELEMENTS: u64 = 64 << 20;

/// One named tensor, in or out.
pub type NamedTensor = (String, Tensor);

/// One declared input of a graph.
#[derive(Debug, Clone)]
pub struct InputSpec {
    pub name: String,
    pub ty: TensorType,
    /// `Some(size)` for a fixed dimension, `None` for a symbolic one.
    pub dims: Vec<Option<u64>>,
}

/// The inputs as `name: TYPE [dims]` (`N` for a symbolic dimension), comma-separated.
pub fn describe_all(specs: &[InputSpec]) -> String {
    specs.iter().map(describe).collect::<Vec<_>>().join(", ")
}

fn describe(spec: &InputSpec) -> String {
    let dims: Vec<String> = spec
        .dims
        .iter()
        .map(|d| d.map_or_else(|| "N".to_string(), |v| v.to_string()))
        .collect();
    format!("'{}': {} [{}]", spec.name, type_name(spec.ty), dims.join(", "))
}

/// A `wasi:nn` element type as its WIT spelling.
pub fn type_name(ty: TensorType) -> &'static str {
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

pub fn element_bytes(ty: TensorType) -> u64 {
    match ty {
        TensorType::Fp16 | TensorType::Bf16 => 2,
        TensorType::Fp32 | TensorType::I32 => 4,
        TensorType::Fp64 | TensorType::I64 => 8,
        TensorType::U8 => 1,
    }
}

/// `inputs` (by name, or in declaration order when unnamed or the graph has one input)
/// in the graph's order, each checked against its declaration.
pub fn checked(specs: &[InputSpec], inputs: Vec<NamedTensor>) -> Result<Vec<Tensor>, RunError> {
    if inputs.len() != specs.len() {
        return Err(RunError::Invalid(format!(
            "invalid input: the graph takes {} input(s) ({}), got {}",
            specs.len(),
            describe_all(specs),
            inputs.len()
        )));
    }
    let mut ordered: Vec<Option<Tensor>> = vec![None; specs.len()];
    for (position, (name, tensor)) in inputs.into_iter().enumerate() {
        let index = if specs.len() == 1 {
            0
        } else if name.is_empty() {
            position
        } else {
            specs.iter().position(|s| s.name == name).ok_or_else(|| {
                RunError::Invalid(format!(
                    "invalid input: the graph has no input '{}' (its inputs: {})",
                    crate::model::text::clip(&name),
                    describe_all(specs)
                ))
            })?
        };
        let spec = &specs[index];
        if ordered[index].is_some() {
            return Err(RunError::Invalid(format!("invalid input: '{}' given twice", spec.name)));
        }
        check(spec, &tensor).map_err(RunError::Invalid)?;
        ordered[index] = Some(tensor);
    }
    Ok(ordered.into_iter().flatten().collect())
}

/// Checks `tensor` against `spec`.
fn check(spec: &InputSpec, tensor: &Tensor) -> Result<(), String> {
    let invalid = |what: String| {
        Err(format!(
            "invalid input '{}': {what}; the graph declares {}",
            spec.name,
            describe(spec)
        ))
    };
    if spec.ty != tensor.ty {
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
    Ok(())
}

/// A graph's `Debug`: its inputs, outputs and what it holds.
pub fn debug_graph(
    f: &mut std::fmt::Formatter<'_>,
    kind: &str,
    inputs: &[InputSpec],
    outputs: &[String],
    bytes: u64,
) -> std::fmt::Result {
    f.debug_struct(kind)
        .field("inputs", &inputs)
        .field("outputs", &outputs)
        .field("bytes", &bytes)
        .finish()
}
