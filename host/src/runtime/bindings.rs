//! Host bindings generated from the WIT contract in `wit/` at the repository root.
//!
//! The three worlds share the `types`, `log`, `metrics` and `metadata` interfaces; they are generated once (with
//! the predictor) and reused by the other two, so a `Tensor` is the same Rust type in
//! every stage and one implementation of each import serves all of them; so are the
//! `wasi:nn` interfaces every world imports (implemented in [`super::nn`]).
//!
//! Exports are async: every call is driven to its deadline by [`super::deadline`], so a
//! plugin parked in a host call (async WASI) can be dropped at its deadline.

#![allow(missing_docs, clippy::all)]

pub mod predictor {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "predictor",
        exports: { default: async },
        // wasi:nn's host functions may trap (a full handle table, the call's deadline
        // passed during a native compute); its resources are the host's own types.
        imports: { "wasi:nn": trappable },
        with: {
            "wasi:nn/graph.graph": crate::runtime::nn::NnGraph,
            "wasi:nn/tensor.tensor": crate::runtime::nn::NnTensor,
            "wasi:nn/inference.graph-execution-context": crate::runtime::nn::NnContext,
            "wasi:nn/errors.error": crate::runtime::nn::NnError,
        },
    });
}

pub mod preprocessor {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "preprocessor",
        exports: { default: async },
        with: {
            "tensorplug:plugin/types": crate::runtime::bindings::predictor::tensorplug::plugin::types,
            "tensorplug:plugin/log": crate::runtime::bindings::predictor::tensorplug::plugin::log,
            "tensorplug:plugin/metrics": crate::runtime::bindings::predictor::tensorplug::plugin::metrics,
            "tensorplug:plugin/metadata": crate::runtime::bindings::predictor::tensorplug::plugin::metadata,
            "wasi:nn": crate::runtime::bindings::predictor::wasi::nn,
        },
    });
}

pub mod postprocessor {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "postprocessor",
        exports: { default: async },
        with: {
            "tensorplug:plugin/types": crate::runtime::bindings::predictor::tensorplug::plugin::types,
            "tensorplug:plugin/log": crate::runtime::bindings::predictor::tensorplug::plugin::log,
            "tensorplug:plugin/metrics": crate::runtime::bindings::predictor::tensorplug::plugin::metrics,
            "tensorplug:plugin/metadata": crate::runtime::bindings::predictor::tensorplug::plugin::metadata,
            "wasi:nn": crate::runtime::bindings::predictor::wasi::nn,
        },
    });
}

pub use predictor::tensorplug::plugin::types;
pub use predictor::tensorplug::plugin::{log, metadata, metrics};
pub use predictor::wasi::nn;
