//! Run the model's ONNX graphs natively through `wasi:nn`.
//!
//! The host loads the graphs that the model's `model.toml` names in `[graphs]` once per
//! model version, parsed and optimised (tract, a pure-Rust ONNX runtime), and every
//! instance shares them: a plugin looks one up by name and calls [`Graph::compute`] with
//! the SDK's [`Tensor`]s. The host checks the inputs against the graph's declared inputs
//! (names, element types, shapes) before it runs anything, and a mismatch comes back as
//! an `invalid-argument` [`Error`] whose [`status`](Error::status) is 400, so `?` fails
//! just that item (or batch) with a clear message. A call that is past its `timeout_ms`
//! when a compute starts or returns traps as a time limit (504), like any other.
//!
//! ```toml
//! # model.toml
//! [graphs]
//! digits = "digits.onnx"     # a path inside the model folder
//! ```
//!
//! ```no_run
//! use tensorplug_guest::prelude::*;
//! use tensorplug_guest::nn;
//!
//! struct Onnx {
//!     graph: nn::Graph,
//! }
//!
//! impl Predictor for Onnx {
//!     fn init(_: Parameters) -> Result<Self, String> {
//!         Ok(Onnx { graph: nn::Graph::by_name("digits")? })
//!     }
//!
//!     fn predict(&mut self, batch: Vec<Tensor>) -> Result<Prediction, ItemError> {
//!         let x = batch.input("input-0")?;
//!         // The graph's input is called `input`; its outputs come back by their names.
//!         let outputs = self.graph.compute(&[x.renamed("input")])?;
//!         Ok(Prediction::new(outputs))
//!     }
//! }
//!
//! export_predictor!(Onnx);
//! ```
//!
//! Element types: FP16, FP32, FP64, UINT8, INT32 and INT64 (what `wasi:nn` can carry).
//! Graph bytes from a plugin (`wasi:nn`'s `load`) are refused by the host: graphs come
//! from the model folder only. The calls work only inside WebAssembly (the host).

use std::fmt;

use crate::bindings::predictor::wasi::nn::errors::ErrorCode;
use crate::bindings::predictor::wasi::nn::{errors, graph, inference, tensor};
use crate::{Datatype, ItemError, Tensor};

/// Why a `wasi:nn` call failed: the host's error code and message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    /// What kind of failure, as `wasi:nn` defines it.
    pub code: ErrorCode,
    /// The host's explanation.
    pub message: String,
}

impl Error {
    fn from_host(error: errors::Error) -> Self {
        Error {
            code: error.code(),
            message: error.data(),
        }
    }

    fn invalid(message: String) -> Self {
        Error {
            code: ErrorCode::InvalidArgument,
            message,
        }
    }

    /// The HTTP-style status an item gets for this error: 400 when the inputs do not fit
    /// the graph (`invalid-argument`), 504 for a `timeout`, 500 otherwise (a missing
    /// graph, a graph that fails: the model's fault, not the client's).
    pub fn status(&self) -> u16 {
        match self.code {
            ErrorCode::InvalidArgument => 400,
            ErrorCode::Timeout => 504,
            _ => 500,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let code = match self.code {
            ErrorCode::InvalidArgument => "invalid-argument",
            ErrorCode::InvalidEncoding => "invalid-encoding",
            ErrorCode::Timeout => "timeout",
            ErrorCode::RuntimeError => "runtime-error",
            ErrorCode::UnsupportedOperation => "unsupported-operation",
            ErrorCode::TooLarge => "too-large",
            ErrorCode::NotFound => "not-found",
            ErrorCode::Security => "security",
            ErrorCode::Unknown => "unknown",
        };
        write!(f, "wasi:nn {code}: {}", self.message)
    }
}

impl std::error::Error for Error {}

impl From<Error> for ItemError {
    fn from(error: Error) -> Self {
        ItemError::new(error.status(), error.to_string())
    }
}

impl From<Error> for String {
    fn from(error: Error) -> Self {
        error.to_string()
    }
}

/// A graph of the model, with an execution context to run it in.
#[derive(Debug)]
pub struct Graph {
    name: String,
    // Dropped before the graph it came from (fields drop in order).
    context: inference::GraphExecutionContext,
    _graph: graph::Graph,
}

impl Graph {
    /// The graph `name` of the model's `[graphs]`; `not-found` if it has none by that name.
    pub fn by_name(name: &str) -> Result<Graph, Error> {
        let loaded = graph::load_by_name(name).map_err(Error::from_host)?;
        let context = loaded.init_execution_context().map_err(Error::from_host)?;
        Ok(Graph {
            name: name.to_owned(),
            context,
            _graph: loaded,
        })
    }

    /// The name it was loaded by.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs the graph: each input by its name (a graph with one input takes any name),
    /// outputs by the graph's output names, in the graph's order.
    pub fn compute(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, Error> {
        let inputs = inputs
            .iter()
            .map(|t| Ok((t.name.clone(), to_nn(t)?)))
            .collect::<Result<Vec<inference::NamedTensor>, Error>>()?;
        let outputs = self.context.compute(inputs).map_err(Error::from_host)?;
        outputs.into_iter().map(|(name, t)| from_nn(name, &t)).collect()
    }
}

impl Tensor {
    /// The same tensor under another name (graphs name their inputs their own way).
    pub fn renamed(&self, name: impl Into<String>) -> Tensor {
        Tensor {
            name: name.into(),
            ..self.clone()
        }
    }
}

fn tensor_type(datatype: Datatype) -> Option<tensor::TensorType> {
    Some(match datatype {
        Datatype::Fp16 => tensor::TensorType::Fp16,
        Datatype::Fp32 => tensor::TensorType::Fp32,
        Datatype::Fp64 => tensor::TensorType::Fp64,
        Datatype::Uint8 => tensor::TensorType::U8,
        Datatype::Int32 => tensor::TensorType::I32,
        Datatype::Int64 => tensor::TensorType::I64,
        _ => return None,
    })
}

fn to_nn(t: &Tensor) -> Result<tensor::Tensor, Error> {
    let ty = tensor_type(t.datatype).ok_or_else(|| {
        Error::invalid(format!(
            "invalid input '{}': wasi:nn cannot carry {:?} tensors",
            t.name, t.datatype
        ))
    })?;
    let dims = t
        .shape
        .iter()
        .map(|&d| u32::try_from(d))
        .collect::<Result<Vec<u32>, _>>()
        .map_err(|_| Error::invalid(format!("invalid input '{}': a dimension exceeds u32", t.name)))?;
    Ok(tensor::Tensor::new(&dims, ty, &t.data))
}

fn from_nn(name: String, t: &tensor::Tensor) -> Result<Tensor, Error> {
    let datatype = match t.ty() {
        tensor::TensorType::Fp16 => Datatype::Fp16,
        tensor::TensorType::Fp32 => Datatype::Fp32,
        tensor::TensorType::Fp64 => Datatype::Fp64,
        tensor::TensorType::U8 => Datatype::Uint8,
        tensor::TensorType::I32 => Datatype::Int32,
        tensor::TensorType::I64 => Datatype::Int64,
        tensor::TensorType::Bf16 => {
            return Err(Error {
                code: ErrorCode::UnsupportedOperation,
                message: format!("output '{name}': BF16 has no V2 datatype"),
            })
        }
    };
    let shape: Vec<u64> = t.dimensions().into_iter().map(u64::from).collect();
    Ok(Tensor::new(name, datatype, &shape, t.data()))
}
