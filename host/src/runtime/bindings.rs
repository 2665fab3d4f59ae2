//! Host bindings generated from the WIT contract in `wit/` at the repository root.
//!
//! The three worlds share the `types`, `log`, `metrics` and `metadata` interfaces; they are generated once (with
//! the predictor) and reused by the other two, so a `Tensor` is the same Rust type in
//! every stage and one implementation of each import serves all of them.
//!
//! Exports are async: every call is driven to its deadline by [`super::deadline`], so a
//! plugin parked in a host call (async WASI) can be dropped at its deadline.

#![allow(missing_docs, clippy::all)]

pub mod predictor {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "predictor",
        exports: { default: async },
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
        },
    });
}

pub use predictor::tensorplug::plugin::types;
pub use predictor::tensorplug::plugin::{log, metadata, metrics};
