//! What a graph may cost the host at load: its size in nodes (`limits.graph_max_nodes`)
//! and the memory its constants hold (`limits.graph_memory_mib`), checked before tract
//! allocates them.
//!
//! A graph of a few hundred bytes can describe a huge constant: an initializer whose
//! dimensions are not backed by data, or an op whose inputs are all constants
//! (`ConstantOfShape`, `Expand`, `Range`, `Tile` of a constant shape) and which tract
//! evaluates while it analyses the graph ("constant folding"). Three checks keep what a
//! load allocates within the budget:
//! - [`check_proto`]: the protobuf, before tract sees it: the node count (subgraphs
//!   refused outright: their bodies are analysed where no check reaches) and every
//!   tensor's declared size;
//! - [`guard_folding`]: every op of the inference model is wrapped so that, when tract
//!   is about to evaluate it on constant inputs, the output's size (known from the
//!   shape inference that runs first) is added to what the graph holds, and the
//!   evaluation refused if that passes the budget;
//! - [`check_typed_folding`]: the same bound for what tract's typed optimiser would
//!   fold, read from the typed model's facts before it runs.
//!
//! After optimisation, [`held_bytes`] is what the plan's constants really hold (packed
//! weights included): what `graph_bytes` reports and what the budget finally caps.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tract_onnx::pb;
use tract_onnx::tract_hir::internal::*;

/// The limits one model's graphs load under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GraphLimits {
    /// What the model's graphs may hold together, in bytes (`limits.graph_memory_mib`).
    pub memory_bytes: u64,
    /// Most nodes one graph may have (`limits.graph_max_nodes`).
    pub max_nodes: usize,
    /// What one value may hold while a compute runs: the instance's memory cap
    /// (`limits.memory_mib`), since the outputs end up in the instance's memory.
    pub value_bytes: u64,
}

/// What a model's graphs may still hold (`limits.graph_memory_mib` less what they
/// hold), shared by its graphs: their loads take from it, and so do the plans made
/// concrete while the model serves ([`super::plans`]), one at a time.
#[derive(Debug)]
pub struct GraphMemory {
    left: std::sync::atomic::AtomicU64,
    /// Held while one of the model's concrete plans is built, so that the build may
    /// reserve all that is left.
    building: Mutex<()>,
}

impl GraphMemory {
    pub fn new(bytes: u64) -> Self {
        GraphMemory {
            left: std::sync::atomic::AtomicU64::new(bytes),
            building: Mutex::new(()),
        }
    }

    /// What is left.
    pub fn left(&self) -> u64 {
        self.left.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Takes `bytes` if that much is left.
    pub fn take(&self, bytes: u64) -> bool {
        use std::sync::atomic::Ordering;
        self.left
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| left.checked_sub(bytes))
            .is_ok()
    }

    pub fn give_back(&self, bytes: u64) {
        self.left.fetch_add(bytes, std::sync::atomic::Ordering::AcqRel);
    }

    /// Runs `build` as the model's only build, with all that is left reserved for it;
    /// it returns what it keeps, and the rest is given back.
    pub fn build<T>(&self, build: impl FnOnce(u64) -> (T, u64)) -> T {
        use std::sync::atomic::Ordering;
        let _only = crate::sync::lock(&self.building);
        let reserved = self.left.swap(0, Ordering::AcqRel);
        let (built, kept) = build(reserved);
        self.left.fetch_add(reserved.saturating_sub(kept), Ordering::AcqRel);
        built
    }
}

/// Why a graph was refused for its size, named for the counter of refused loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Not a graph tensorplug can run (unreadable, corrupt, unsupported).
    Invalid,
    Memory,
    Nodes,
    Subgraph,
    ValueSize,
    Time,
}

impl Refusal {
    pub fn label(self) -> &'static str {
        match self {
            Refusal::Invalid => "invalid",
            Refusal::Memory => "graph_memory_mib",
            Refusal::Nodes => "graph_max_nodes",
            Refusal::Subgraph => "subgraph",
            Refusal::ValueSize => "memory_mib",
            Refusal::Time => "load_timeout",
        }
    }
}

/// A refused load: the reason for the model's load error, and what it ran into.
#[derive(Debug)]
pub struct Refused {
    pub limit: Refusal,
    pub reason: String,
}

fn memory_refused(what: String, bytes: u64, budget: u64) -> Refused {
    Refused {
        limit: Refusal::Memory,
        reason: format!(
            "{what} would hold {bytes} bytes; the model's graphs may hold at most {budget} bytes (limits.graph_memory_mib)"
        ),
    }
}

/// Bytes of one element of an ONNX `TensorProto.data_type`; strings and unknown types
/// count 8 (their data is in the file anyway).
fn onnx_element_bytes(data_type: i32) -> u64 {
    match data_type {
        2 | 3 | 9 => 1,       // UINT8, INT8, BOOL
        4 | 5 | 10 | 16 => 2, // UINT16, INT16, FLOAT16, BFLOAT16
        1 | 6 | 12 => 4,      // FLOAT, INT32, UINT32
        _ => 8,               // INT64, DOUBLE, UINT64, complex, string
    }
}

/// A tensor's declared size in bytes, `None` when its dimensions are negative or overflow.
fn declared_bytes(tensor: &pb::TensorProto) -> Option<u64> {
    tensor
        .dims
        .iter()
        .try_fold(onnx_element_bytes(tensor.data_type), |total, &d| {
            total.checked_mul(u64::try_from(d).ok()?)
        })
}

/// Checks the protobuf: at most `limits.max_nodes` nodes, no subgraphs, and tensors
/// (initializers, attribute constants) whose declared sizes fit the budget together.
/// Returns those tensors' bytes.
pub fn check_proto(model: &pb::ModelProto, limits: &GraphLimits, budget: u64) -> Result<u64, Refused> {
    let graph = model.graph.as_ref().ok_or_else(|| Refused {
        limit: Refusal::Invalid,
        reason: "not a valid ONNX graph: the model has no graph".into(),
    })?;
    if graph.node.len() > limits.max_nodes {
        return Err(Refused {
            limit: Refusal::Nodes,
            reason: format!(
                "{} nodes; a graph may have at most {} (limits.graph_max_nodes)",
                graph.node.len(),
                limits.max_nodes
            ),
        });
    }
    let mut total: u64 = 0;
    let mut add = |tensor: &pb::TensorProto, what: &str| -> Result<(), Refused> {
        let bytes = declared_bytes(tensor).unwrap_or(u64::MAX);
        total = total.saturating_add(bytes);
        if total > budget {
            return Err(memory_refused(
                format!("{what} '{}'", clip(&tensor.name)),
                total,
                budget,
            ));
        }
        Ok(())
    };
    for tensor in &graph.initializer {
        add(tensor, "the initializer")?;
    }
    for node in &graph.node {
        for attribute in &node.attribute {
            if attribute.g.is_some() || !attribute.graphs.is_empty() {
                return Err(Refused {
                    limit: Refusal::Subgraph,
                    reason: format!(
                        "node '{}' ({}) has a subgraph; graphs with control flow (If, Loop, Scan) are refused",
                        clip(&node.name),
                        clip(&node.op_type)
                    ),
                });
            }
            if let Some(tensor) = &attribute.t {
                add(tensor, &format!("the constant of node '{}'", clip(&node.name)))?;
            }
            for tensor in &attribute.tensors {
                add(tensor, &format!("a constant of node '{}'", clip(&node.name)))?;
            }
        }
    }
    Ok(total)
}

fn clip(text: &str) -> Cow<'_, str> {
    crate::model::text::clip(text)
}

/// What the values tract folds at load hold: a running total, per folded node, on top of
/// the graph's own tensors.
#[derive(Debug)]
struct FoldBudget {
    base: u64,
    budget: u64,
    folded: Mutex<HashMap<usize, u64>>,
}

impl FoldBudget {
    /// Records that node `id` is about to hold `bytes` (replacing what it held before),
    /// or refuses.
    fn take(&self, id: usize, name: &str, bytes: u64) -> TractResult<()> {
        let mut folded = crate::sync::lock(&self.folded);
        let others: u64 = folded.iter().filter(|(k, _)| **k != id).map(|(_, v)| *v).sum();
        let total = self.base.saturating_add(others).saturating_add(bytes);
        if total > self.budget {
            let refused = memory_refused(
                format!("folding node '{}' into a constant", clip(name)),
                total,
                self.budget,
            );
            bail!(FoldRefused(refused.reason));
        }
        folded.insert(id, bytes);
        Ok(())
    }
}

/// The error a guarded op raises: found again in the load's error chain.
#[derive(Debug)]
pub struct FoldRefused(pub String);

impl std::fmt::Display for FoldRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FoldRefused {}

/// An inference op whose evaluation on constant inputs is checked against the budget
/// first (see the module's documentation). Everything else is the wrapped op's.
#[derive(Debug, Clone)]
struct Guarded {
    inner: Box<dyn InferenceOp>,
    id: usize,
    name: String,
    budget: Arc<FoldBudget>,
}

/// What `Range(start, limit, delta)` of constants holds: its length, 8 bytes an element
/// (the widest type it can have); `u64::MAX` when the inputs make no sense.
fn range_bytes(inputs: &[InferenceFact]) -> u64 {
    let value = |i: usize| -> Option<f64> {
        let tensor = inputs.get(i)?.value.concretize()?;
        tensor.cast_to_scalar::<f64>().ok()
    };
    match (value(0), value(1), value(2)) {
        (Some(start), Some(limit), Some(delta)) if delta != 0.0 => {
            let length = ((limit - start) / delta).ceil().max(0.0);
            if length.is_finite() && length < 1e18 {
                (length as u64).saturating_mul(8)
            } else {
                u64::MAX
            }
        }
        _ => u64::MAX,
    }
}

/// Bytes of a fact whose type and shape are known, `None` otherwise.
fn inference_fact_bytes(fact: &InferenceFact) -> Option<u64> {
    let datum_type = fact.datum_type.concretize()?;
    let shape = fact.shape.concretize()?;
    shape.iter().try_fold(datum_type.size_of() as u64, |total, d| {
        total.checked_mul(u64::try_from(d.to_i64().ok()?).ok()?)
    })
}

fn tensor_bytes(tensor: &Tensor) -> u64 {
    let datum_type = tensor.datum_type();
    if datum_type == DatumType::Opaque {
        return tensor
            .as_slice::<Opaque>()
            .map(|values| values.iter().map(opaque_bytes).sum())
            .unwrap_or(0);
    }
    (tensor.len() as u64).saturating_mul(datum_type.size_of() as u64)
}

/// What an opaque value holds: tract's packed matrix-multiplication weights, or an
/// estimate of their unpacked size.
fn opaque_bytes(value: &Opaque) -> u64 {
    use tract_onnx::tract_core::tract_linalg::frame::mmm::{EagerPackedInput, MMMInputValue};
    match value.0.downcast_ref::<Box<dyn MMMInputValue>>() {
        Some(input) => match input.downcast_ref::<EagerPackedInput>() {
            Some(packed) => packed.packed.len() as u64,
            None => (input.mn() as u64).saturating_mul(input.k() as u64).saturating_mul(4),
        },
        None => 0,
    }
}

impl Op for Guarded {
    fn name(&self) -> Cow<'_, str> {
        self.inner.as_op().name()
    }

    fn info(&self) -> TractResult<Vec<String>> {
        self.inner.as_op().info()
    }

    fn validation(&self) -> Validation {
        self.inner.as_op().validation()
    }

    fn same_as(&self, other: &dyn Op) -> bool {
        self.inner.as_op().same_as(other)
    }

    fn as_typed(&self) -> Option<&dyn TypedOp> {
        self.inner.as_op().as_typed()
    }
}

impl EvalOp for Guarded {
    fn is_stateless(&self) -> bool {
        self.inner.as_op().is_stateless()
    }

    fn eval(&self, inputs: TVec<TValue>) -> TractResult<TVec<TValue>> {
        self.inner.as_op().eval(inputs)
    }

    fn eval_with_session(&self, session: &SessionState, inputs: TVec<TValue>) -> TractResult<TVec<TValue>> {
        self.inner.as_op().eval_with_session(session, inputs)
    }

    fn state(&self, session: &mut SessionState, node_id: usize) -> TractResult<Option<Box<dyn OpState>>> {
        self.inner.as_op().state(session, node_id)
    }
}

impl InferenceOp for Guarded {
    fn infer(
        &mut self,
        inputs: TVec<&InferenceFact>,
        outputs: TVec<&InferenceFact>,
        observed: TVec<&InferenceFact>,
    ) -> TractResult<(TVec<InferenceFact>, TVec<InferenceFact>, TVec<InferenceFact>)> {
        // tract evaluates a stateless op whose inputs are all known (see
        // `InferenceOp::infer`); its outputs' shapes are inferred first, so their size is
        // known before anything is allocated.
        let (inferred_inputs, inferred_outputs, _) =
            self.inner
                .infer_facts(inputs.clone(), outputs.clone(), observed.clone())?;
        let folds = self.inner.as_op().is_stateless() && inferred_inputs.iter().all(|fact| fact.value.is_concrete());
        if folds {
            let known: Option<u64> = inferred_outputs
                .iter()
                .map(inference_fact_bytes)
                .try_fold(0u64, |total, bytes| Some(total.saturating_add(bytes?)));
            // `Range`'s length follows from its inputs' values, which tract 0.21's shape
            // inference gets wrong for large ones (2^40 is inferred as 0).
            let known = if self.inner.as_op().name() == "Range" {
                Some(range_bytes(&inferred_inputs))
            } else {
                known
            };
            if let Some(bytes) = known {
                self.budget.take(self.id, &self.name, bytes)?;
            }
        }
        let inferred = self.inner.infer(inputs, outputs, observed)?;
        if folds {
            // A shape inference that did not know the size: counted once it is there.
            let held: u64 = inferred
                .1
                .iter()
                .filter_map(|fact| fact.value.concretize())
                .map(|tensor| tensor_bytes(&tensor))
                .sum();
            self.budget.take(self.id, &self.name, held)?;
        }
        Ok(inferred)
    }

    fn infer_facts(
        &mut self,
        inputs: TVec<&InferenceFact>,
        outputs: TVec<&InferenceFact>,
        observed: TVec<&InferenceFact>,
    ) -> TractResult<(TVec<InferenceFact>, TVec<InferenceFact>, TVec<InferenceFact>)> {
        self.inner.infer_facts(inputs, outputs, observed)
    }

    fn observe_outlets(&self, model: &InferenceModel, node: &InferenceNode) -> TractResult<Vec<OutletId>> {
        self.inner.observe_outlets(model, node)
    }

    fn incorporate(&self, model: &InferenceModel, node: &InferenceNode) -> TractResult<Option<InferenceModelPatch>> {
        self.inner.incorporate(model, node)
    }

    fn nboutputs(&self) -> TractResult<usize> {
        self.inner.nboutputs()
    }

    fn as_op(&self) -> &dyn Op {
        self.inner.as_op()
    }

    fn as_op_mut(&mut self) -> &mut dyn Op {
        self.inner.as_op_mut()
    }

    fn to_typed(
        &self,
        source: &InferenceModel,
        node: &InferenceNode,
        target: &mut TypedModel,
        mapping: &HashMap<OutletId, OutletId>,
    ) -> TractResult<TVec<OutletId>> {
        self.inner.to_typed(source, node, target, mapping)
    }
}

/// Wraps every op of `model` (its sources and constants excepted) so that what tract folds while it
/// analyses the graph stays within `budget`, `base` (the graph's own tensors) included.
pub fn guard_folding(model: &mut InferenceModel, base: u64, budget: u64) {
    let shared = Arc::new(FoldBudget {
        base,
        budget,
        folded: Mutex::new(HashMap::new()),
    });
    for node in model.nodes_mut() {
        // Sources fold nothing; constants are the graph's own tensors, counted in `base`.
        if node.inputs.is_empty() {
            continue;
        }
        let inner = std::mem::replace(&mut node.op, Box::new(tract_onnx::tract_core::ops::dummy::Dummy::new()));
        node.op = Box::new(Guarded {
            inner,
            id: node.id,
            name: node.name.clone(),
            budget: shared.clone(),
        });
    }
}

/// Bytes of a typed fact, `None` when its shape is symbolic.
fn typed_fact_bytes(fact: &TypedFact) -> Option<u64> {
    fact.shape
        .iter()
        .try_fold(fact.datum_type.size_of() as u64, |total, d| {
            total.checked_mul(u64::try_from(d.to_i64().ok()?).ok()?)
        })
}

/// What `model`'s constants hold, in bytes (packed weights included).
pub fn held_bytes(model: &TypedModel) -> u64 {
    model
        .nodes()
        .iter()
        .filter_map(|node| node.op_as::<tract_onnx::tract_core::ops::konst::Const>())
        .map(|konst| tensor_bytes(&konst.0))
        .fold(0u64, u64::saturating_add)
}

/// Refuses `model` when what tract's typed optimiser would fold into constants (every
/// stateless node fed by constants only, transitively), added to the constants it
/// already holds, would pass `budget`.
pub fn check_typed_folding(model: &TypedModel, budget: u64) -> Result<(), Refused> {
    let konst = |node: &TypedNode| node.op_is::<tract_onnx::tract_core::ops::konst::Const>();
    let mut total = held_bytes(model);
    if total > budget {
        return Err(memory_refused("the graph's constants".into(), total, budget));
    }
    let order = model.eval_order().map_err(|e| Refused {
        limit: Refusal::Invalid,
        reason: format!("cannot order the graph: {e:#}"),
    })?;
    let mut foldable = vec![false; model.nodes().len()];
    for id in order {
        let node = model.node(id);
        if konst(node) {
            foldable[id] = true;
            continue;
        }
        if node.inputs.is_empty() || !node.op.is_stateless() || !node.inputs.iter().all(|i| foldable[i.node]) {
            continue;
        }
        foldable[id] = true;
        for output in &node.outputs {
            total = total.saturating_add(typed_fact_bytes(&output.fact).unwrap_or(0));
        }
        if total > budget {
            return Err(memory_refused(
                format!("folding node '{}' into a constant", clip(&node.name)),
                total,
                budget,
            ));
        }
    }
    Ok(())
}

/// Per node of `model`, the bytes its outputs hold as an expression of the graph's
/// symbols, for the nodes whose outputs could pass `value_bytes` when every symbol is
/// at `max_symbol`; those are checked as a compute runs, before the node allocates.
/// A node whose outputs pass it at any size refuses the graph.
pub fn value_guards(model: &TypedModel, value_bytes: u64, max_symbol: i64) -> Result<Vec<Option<TDim>>, Refused> {
    let mut worst = SymbolValues::default();
    for symbol in model.symbols.all_symbols() {
        worst = worst.with(&symbol, max_symbol);
    }
    let mut guards = vec![None; model.nodes().len()];
    for node in model.nodes() {
        // Constants are the graph's (counted by its budget); sources are the instance's
        // own inputs, already in its memory.
        if node.inputs.is_empty() {
            continue;
        }
        let mut bytes = TDim::Val(0);
        for output in &node.outputs {
            let size = output.fact.datum_type.size_of() as i64;
            bytes += output.fact.shape.volume() * size;
        }
        match bytes.to_i64() {
            Ok(fixed) if fixed as u64 > value_bytes => {
                return Err(Refused {
                    limit: Refusal::ValueSize,
                    reason: format!(
                        "node '{}' computes {fixed} bytes, more than an instance's memory of {value_bytes} bytes (limits.memory_mib)",
                        clip(&node.name)
                    ),
                })
            }
            Ok(_) => {}
            Err(_) => {
                let at_worst = bytes.eval(&worst).to_i64().map(|b| b as u64).unwrap_or(u64::MAX);
                if at_worst > value_bytes {
                    guards[node.id] = Some(bytes);
                }
            }
        }
    }
    Ok(guards)
}
