//! Host bindings generated from the WIT contract in `wit/` at the repository root.
//!
//! The three worlds share the `types`, `log`, `metrics` and `metadata` interfaces; they are generated once (with
//! the predictor) and reused by the other two, so a `Tensor` is the same Rust type in
//! every stage and one implementation of each import serves all of them; so are the
//! `wasi:nn` interfaces every world imports (implemented in [`super::nn`]). The worlds'
//! WASI imports are wasmtime-wasi's bindings.
//!
//! Each released version of the package has its own bindings: the current one (`wit/`,
//! at the module's root) and the frozen ones in `wit/released/<version>/` (in
//! [`v0_1_0`]). A frozen version's records are structurally the current ones, so its
//! bindings reuse the current Rust types (`with`): wasmtime checks the component's types
//! against them when a stage is linked, and a stage of any version is called with the
//! same values. Its imports that differ (0.1.0's `log`) get their own `Host` trait,
//! implemented in [`super::wit_version`] over the current one.
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
            // The worlds' WASI imports are wasmtime-wasi's own (linked by the engine).
            "wasi:io": wasmtime_wasi::p2::bindings::io,
            "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
            "wasi:random": wasmtime_wasi::p2::bindings::random,
            "wasi:cli": wasmtime_wasi::p2::bindings::cli,
            "wasi:filesystem": wasmtime_wasi::p2::bindings::filesystem,
        },
    });
}

/// A current world besides the predictor: its own exports, its imports the predictor's.
macro_rules! world_sharing_the_predictors_imports {
    ($world:literal) => {
        wasmtime::component::bindgen!({
            path: "../wit",
            world: $world,
            exports: { default: async },
            with: {
                "tensorplug:plugin/types": crate::runtime::bindings::predictor::tensorplug::plugin::types,
                "tensorplug:plugin/log": crate::runtime::bindings::predictor::tensorplug::plugin::log,
                "tensorplug:plugin/metrics": crate::runtime::bindings::predictor::tensorplug::plugin::metrics,
                "tensorplug:plugin/metadata": crate::runtime::bindings::predictor::tensorplug::plugin::metadata,
                "wasi:nn": crate::runtime::bindings::predictor::wasi::nn,
                "wasi:io": wasmtime_wasi::p2::bindings::io,
                "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
                "wasi:random": wasmtime_wasi::p2::bindings::random,
                "wasi:cli": wasmtime_wasi::p2::bindings::cli,
                "wasi:filesystem": wasmtime_wasi::p2::bindings::filesystem,
            },
        });
    };
}

pub mod preprocessor {
    world_sharing_the_predictors_imports!("preprocessor");
}

pub mod postprocessor {
    world_sharing_the_predictors_imports!("postprocessor");
}

/// `tensorplug:plugin@0.1.0` (`wit/released/0.1.0/plugin.wit`): `log` only, no
/// `metrics`, `metadata` or `wasi:nn`; the exports are the current ones.
pub mod v0_1_0 {
    pub mod predictor {
        wasmtime::component::bindgen!({
            path: "../wit/released/0.1.0",
            world: "predictor",
            exports: { default: async },
            with: {
                "tensorplug:plugin/types": crate::runtime::bindings::predictor::tensorplug::plugin::types,
            },
        });
    }

    /// A 0.1.0 world besides the predictor, its imports the 0.1.0 predictor's.
    macro_rules! world_sharing_the_0_1_0_predictors_imports {
        ($world:literal) => {
            wasmtime::component::bindgen!({
                path: "../wit/released/0.1.0",
                world: $world,
                exports: { default: async },
                with: {
                    "tensorplug:plugin/types": crate::runtime::bindings::predictor::tensorplug::plugin::types,
                    "tensorplug:plugin/log": crate::runtime::bindings::v0_1_0::predictor::tensorplug::plugin::log,
                },
            });
        };
    }

    pub mod preprocessor {
        world_sharing_the_0_1_0_predictors_imports!("preprocessor");
    }

    pub mod postprocessor {
        world_sharing_the_0_1_0_predictors_imports!("postprocessor");
    }

    pub use predictor::tensorplug::plugin::log;
}

pub use predictor::tensorplug::plugin::types;
pub use predictor::tensorplug::plugin::{log, metadata, metrics};
pub use predictor::wasi::nn;
