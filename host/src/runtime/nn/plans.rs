//! A graph's plans: the one made at load, with its symbolic sizes (the batch `N`), which
//! runs any legal input; and plans made concrete for the sizes computes actually use,
//! which tract optimises further (kernels picked for the real shapes, no symbol
//! resolved per node) and which run the example graphs 1.5 to 3 times faster.
//!
//! A concrete plan is built by the first compute that uses its sizes, from the
//! decluttered model kept at load (measured: 0.5 to 2 ms for the digits graphs, about
//! what planning took at load; a compute whose deadline leaves less than four times that
//! runs on the symbolic plan instead, and leaves the build to a later one). Built in the
//! call, not in the background, so that a size's computes give the same bits whatever
//! the timing. What bounds them: at most [`MAX_CONCRETE_PLANS`] per graph, for sizes up
//! to [`MAX_PLANNED_DIM`], one build at a time per model, and what they hold counted in
//! the model's graph memory (`limits.graph_memory_mib`), reserved before the build and
//! checked as it folds constants. A client that sends every batch size gets the first
//! few planned and the rest run on the symbolic plan; a build that fails or does not fit
//! leaves its sizes on the symbolic plan for good.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tract_onnx::prelude::{Symbol, SymbolValues, TDim, TVec, TypedModel};

use super::budget::{self, GraphMemory};
use crate::sync::lock;

/// A runnable plan, shared by every execution context of a graph.
pub type Runnable = tract_onnx::prelude::TypedSimplePlan<TypedModel>;

/// Most concrete plans one graph gets.
pub const MAX_CONCRETE_PLANS: usize = 8;

/// Largest symbolic size a concrete plan is made for; larger ones run on the symbolic
/// plan (their compute dwarfs what planning saves).
pub const MAX_PLANNED_DIM: u64 = 256;

/// One runnable plan and what checking its computes needs.
pub struct Plan {
    pub runnable: Arc<Runnable>,
    /// Per node, the bytes its outputs hold, where they could pass an instance's memory.
    pub guards: Vec<Option<TDim>>,
}

/// The values of a graph's symbolic input dimensions in one compute, in input order.
pub type SizesKey = TVec<u64>;

/// What making concrete plans needs, shared with the threads that build them.
struct Planner {
    /// The graph decluttered, with its symbols: what each concrete plan is made from.
    template: TypedModel,
    /// The symbol of each symbolic input dimension, in input order.
    symbols: Vec<Symbol>,
    value_bytes: u64,
    /// What the model's graphs may still hold.
    memory: Mutex<Arc<GraphMemory>>,
    /// How long planning the graph took at load: about what a concrete plan takes.
    build_time: Duration,
    /// Made (or given up on, as the symbolic plan) per sizes, at most
    /// [`MAX_CONCRETE_PLANS`].
    made: Mutex<Vec<(SizesKey, Arc<Plan>)>>,
    /// What the concrete plans hold.
    bytes: AtomicU64,
}

/// The plans of one graph.
pub struct Plans {
    symbolic: Arc<Plan>,
    planner: Option<Arc<Planner>>,
}

impl Plans {
    /// `symbolic` alone: a graph with fixed sizes, or whose sizes cannot be made concrete.
    pub fn fixed(symbolic: Plan) -> Self {
        Plans {
            symbolic: Arc::new(symbolic),
            planner: None,
        }
    }

    /// `symbolic`, and concrete plans made from `template` (the decluttered model whose
    /// input dimensions `symbols` are, in input order) within `memory`.
    pub fn planned(
        symbolic: Plan,
        template: TypedModel,
        symbols: Vec<Symbol>,
        value_bytes: u64,
        memory: Arc<GraphMemory>,
        build_time: Duration,
    ) -> Self {
        Plans {
            symbolic: Arc::new(symbolic),
            planner: Some(Arc::new(Planner {
                template,
                symbols,
                value_bytes,
                memory: Mutex::new(memory),
                build_time,
                made: Mutex::new(Vec::with_capacity(MAX_CONCRETE_PLANS)),
                bytes: AtomicU64::new(0),
            })),
        }
    }

    /// Counts what the concrete plans hold in `memory` (the model's, shared by its
    /// graphs) from now on.
    pub fn share_memory(&self, memory: Arc<GraphMemory>) {
        if let Some(planner) = &self.planner {
            *lock(&planner.memory) = memory;
        }
    }

    /// What the concrete plans hold.
    pub fn concrete_bytes(&self) -> u64 {
        self.planner.as_ref().map_or(0, |p| p.bytes.load(Ordering::Relaxed))
    }

    /// The plan for a compute whose symbolic input dimensions are `sizes`: the concrete
    /// one, made now if it may be and `deadline` leaves time for it; else the symbolic.
    pub fn for_sizes(&self, sizes: &[u64], deadline: Instant) -> Arc<Plan> {
        let Some(planner) = &self.planner else {
            return self.symbolic.clone();
        };
        if sizes.iter().any(|&size| size > MAX_PLANNED_DIM) {
            return self.symbolic.clone();
        }
        if let Some(plan) = planner.made(sizes) {
            return plan;
        }
        // A build takes about as long as the load's planning; one that could make the
        // call miss its deadline is left for a call with time to spare.
        if Instant::now() + planner.build_time * 4 >= deadline {
            return self.symbolic.clone();
        }
        let memory = lock(&planner.memory).clone();
        memory.build(|reserved| {
            // Another compute may have made it while this one waited for the build.
            if let Some(plan) = planner.made(sizes) {
                return (plan, 0);
            }
            let mut made = lock(&planner.made);
            if made.len() >= MAX_CONCRETE_PLANS {
                return (self.symbolic.clone(), 0);
            }
            let (plan, held) = planner.build(sizes, reserved, &self.symbolic);
            made.push((sizes.iter().copied().collect(), plan.clone()));
            (plan, held)
        })
    }

    /// How many sizes have a concrete plan (or were given up on).
    pub fn planned_sizes(&self) -> usize {
        self.planner.as_ref().map_or(0, |p| lock(&p.made).len())
    }
}

impl Planner {
    fn made(&self, sizes: &[u64]) -> Option<Arc<Plan>> {
        let made = lock(&self.made);
        made.iter()
            .find(|(key, _)| key.as_slice() == sizes)
            .map(|(_, plan)| plan.clone())
    }

    /// The plan for `sizes` within `budget` bytes and what it holds, or `symbolic` (for
    /// good) when it cannot be made.
    fn build(&self, sizes: &[u64], budget: u64, symbolic: &Arc<Plan>) -> (Arc<Plan>, u64) {
        let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.make(sizes, budget)));
        match built {
            Ok(Ok((plan, held))) => {
                self.bytes.fetch_add(held, Ordering::Relaxed);
                (Arc::new(plan), held)
            }
            Ok(Err(reason)) => {
                tracing::debug!("no concrete plan for sizes {sizes:?}: {reason}");
                (symbolic.clone(), 0)
            }
            Err(_) => {
                tracing::debug!("no concrete plan for sizes {sizes:?}: tract panicked");
                (symbolic.clone(), 0)
            }
        }
    }
    /// The template with `key`'s sizes, optimised and planned within `budget` bytes,
    /// and what it holds.
    fn make(&self, key: &[u64], budget: u64) -> Result<(Plan, u64), String> {
        let mut values = SymbolValues::default();
        for (symbol, &size) in self.symbols.iter().zip(key) {
            let size = i64::try_from(size).map_err(|e| e.to_string())?;
            match values.get(symbol) {
                Some(set) if set != size => return Err(format!("{symbol} is both {set} and {size}")),
                _ => values = values.with(symbol, size),
            }
        }
        let concrete = self.template.concretize_dims(&values).map_err(|e| format!("{e:#}"))?;
        // Sizes made concrete can make more of the graph foldable into constants.
        budget::check_typed_folding(&concrete, budget).map_err(|refused| refused.reason)?;
        let optimised = concrete.into_optimized().map_err(|e| format!("{e:#}"))?;
        let held = budget::held_bytes(&optimised);
        if held > budget {
            return Err(format!("it would hold {held} bytes, {budget} left"));
        }
        let guards = budget::value_guards(&optimised, self.value_bytes, MAX_PLANNED_DIM as i64)
            .map_err(|refused| refused.reason)?;
        let runnable = optimised.into_runnable().map_err(|e| format!("{e:#}"))?;
        Ok((
            Plan {
                runnable: Arc::new(runnable),
                guards,
            },
            held,
        ))
    }
}
