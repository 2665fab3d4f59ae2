//! The host side of `wasi:nn`'s four interfaces, for every stage's store: graphs by name
//! from the model version's [`super::ModelGraphs`], tensors and errors as resources in
//! the store's handle table (so `limits.max_handles` caps them too).

use std::sync::Arc;

use wasmtime::component::Resource;
use wasmtime::Trap;

use super::Graph;
use super::RunError;
use crate::runtime::bindings::nn::errors::ErrorCode;
use crate::runtime::bindings::nn::graph::{ExecutionTarget, GraphBuilder, GraphEncoding};
use crate::runtime::bindings::nn::inference::NamedTensor;
use crate::runtime::bindings::nn::tensor::{TensorData, TensorDimensions, TensorType};
use crate::runtime::bindings::nn::{errors, graph, inference, tensor};
use crate::runtime::store::StoreState;

/// What a plugin sees when it passes graph bytes to `load`.
const LOAD_REFUSED: &str = "tensorplug loads graphs only from the model folder: name them in model.toml's \
    [graphs] and use load-by-name; graph bytes from a plugin are refused";

/// A `graph` resource: one of the model's graphs.
pub struct NnGraph(Arc<Graph>);

/// A `graph-execution-context` resource. Stateless beyond its graph: `compute` takes
/// and returns every tensor, the WIT's way.
pub struct NnContext(Arc<Graph>);

/// A `tensor` resource.
#[derive(Clone, Debug, PartialEq)]
pub struct NnTensor {
    pub dimensions: Vec<u32>,
    pub ty: TensorType,
    pub data: Vec<u8>,
}

/// An `error` resource.
#[derive(Debug)]
pub struct NnError {
    code: ErrorCode,
    message: String,
}

type Answer<T> = wasmtime::Result<Result<T, Resource<NnError>>>;

impl StoreState {
    /// `Ok(Err(error))`: the plugin gets an error resource (a full table traps).
    fn nn_error<T>(&mut self, code: ErrorCode, message: String) -> Answer<T> {
        Ok(Err(self.table().push(NnError { code, message })?))
    }

    /// Traps as a time limit when the call's deadline has passed: native compute is not
    /// interrupted by epochs, so it is checked around it.
    fn check_deadline(&self) -> wasmtime::Result<()> {
        if self.deadline_passed() {
            return Err(wasmtime::Error::from(Trap::Interrupt));
        }
        Ok(())
    }
}

impl graph::Host for StoreState {
    fn load(&mut self, _: Vec<GraphBuilder>, _: GraphEncoding, _: ExecutionTarget) -> Answer<Resource<NnGraph>> {
        self.nn_error(ErrorCode::UnsupportedOperation, LOAD_REFUSED.into())
    }

    fn load_by_name(&mut self, name: String) -> Answer<Resource<NnGraph>> {
        let found = self.tag().shared.graphs.get(&name).cloned();
        match found {
            Some(graph) => Ok(Ok(self.table().push(NnGraph(graph))?)),
            None => {
                let known = self.tag().shared.graphs.names().join(", ");
                self.nn_error(
                    ErrorCode::NotFound,
                    format!(
                        "no graph '{}' in the model's [graphs] (it has: {})",
                        crate::model::text::clip(&name),
                        if known.is_empty() { "none" } else { &known }
                    ),
                )
            }
        }
    }
}

impl graph::HostGraph for StoreState {
    fn init_execution_context(&mut self, graph: Resource<NnGraph>) -> Answer<Resource<NnContext>> {
        let graph = self.table().get(&graph)?.0.clone();
        Ok(Ok(self.table().push(NnContext(graph))?))
    }

    fn drop(&mut self, graph: Resource<NnGraph>) -> wasmtime::Result<()> {
        self.table().delete(graph)?;
        Ok(())
    }
}

impl inference::Host for StoreState {}

impl inference::HostGraphExecutionContext for StoreState {
    fn compute(&mut self, context: Resource<NnContext>, inputs: Vec<NamedTensor>) -> Answer<Vec<NamedTensor>> {
        self.check_deadline()?;
        let graph = self.table().get(&context)?.0.clone();
        let mut tensors = Vec::with_capacity(inputs.len());
        for (name, tensor) in inputs {
            tensors.push((name, self.table().delete(tensor)?));
        }
        let deadline = self.deadline();
        let memory_cap = self.memory_cap();
        let (wall, started) = (std::time::SystemTime::now(), std::time::Instant::now());
        let outcome = crate::runtime::deadline::busy(|| graph.run(tensors, deadline, memory_cap));
        let now = std::time::Instant::now();
        let error = match &outcome {
            _ if now >= deadline => Some("past the call's deadline".to_owned()),
            Ok(_) => None,
            Err(RunError::Invalid(message) | RunError::Failed(message) | RunError::TooLarge(message)) => {
                Some(message.clone())
            }
            Err(RunError::Deadline) => Some("past the call's deadline".to_owned()),
        };
        crate::traces::journal::compute(wall, now - started, error);
        if now >= deadline {
            // Stopped between two nodes, or done past the deadline: a time limit either way.
            super::counters::compute_past_deadline(now - deadline);
            return Err(wasmtime::Error::from(Trap::Interrupt));
        }
        match outcome {
            Ok(outputs) => {
                let mut named = Vec::with_capacity(outputs.len());
                for (name, tensor) in outputs {
                    named.push((name, self.table().push(tensor)?));
                }
                Ok(Ok(named))
            }
            Err(RunError::Invalid(message)) => self.nn_error(ErrorCode::InvalidArgument, message),
            Err(RunError::Failed(message)) => self.nn_error(ErrorCode::RuntimeError, message),
            Err(RunError::TooLarge(message)) => {
                super::counters::compute_too_large();
                self.nn_error(ErrorCode::RuntimeError, message)
            }
            // The clock moved back past the deadline between the plan's check and ours.
            Err(RunError::Deadline) => Err(wasmtime::Error::from(Trap::Interrupt)),
        }
    }

    fn drop(&mut self, context: Resource<NnContext>) -> wasmtime::Result<()> {
        self.table().delete(context)?;
        Ok(())
    }
}

impl tensor::Host for StoreState {}

impl tensor::HostTensor for StoreState {
    fn new(
        &mut self,
        dimensions: TensorDimensions,
        ty: TensorType,
        data: TensorData,
    ) -> wasmtime::Result<Resource<NnTensor>> {
        Ok(self.table().push(NnTensor { dimensions, ty, data })?)
    }

    fn dimensions(&mut self, tensor: Resource<NnTensor>) -> wasmtime::Result<TensorDimensions> {
        Ok(self.table().get(&tensor)?.dimensions.clone())
    }

    fn ty(&mut self, tensor: Resource<NnTensor>) -> wasmtime::Result<TensorType> {
        Ok(self.table().get(&tensor)?.ty)
    }

    fn data(&mut self, tensor: Resource<NnTensor>) -> wasmtime::Result<TensorData> {
        Ok(self.table().get(&tensor)?.data.clone())
    }

    fn drop(&mut self, tensor: Resource<NnTensor>) -> wasmtime::Result<()> {
        self.table().delete(tensor)?;
        Ok(())
    }
}

impl errors::Host for StoreState {}

impl errors::HostError for StoreState {
    fn code(&mut self, error: Resource<NnError>) -> wasmtime::Result<ErrorCode> {
        Ok(self.table().get(&error)?.code)
    }

    fn data(&mut self, error: Resource<NnError>) -> wasmtime::Result<String> {
        Ok(self.table().get(&error)?.message.clone())
    }

    fn drop(&mut self, error: Resource<NnError>) -> wasmtime::Result<()> {
        self.table().delete(error)?;
        Ok(())
    }
}
