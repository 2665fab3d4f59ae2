//! tensorplug: an inference server whose models are sandboxed WebAssembly plugins.
//!
//! Layers, with arrows pointing one way:
//! - **edge** — [`http`] (REST routes), [`config`] (the command line), [`server`] (startup
//!   and graceful shutdown), [`error`] (request-level errors and their status);
//! - **protocol** — [`protocol`] (the Open Inference Protocol's JSON and binary wire
//!   format), [`items`] (requests to items and outcomes back to answers);
//! - **serving** — [`serving`] (the repository of live models, the dynamic batcher, the
//!   instance pool) and [`model_config`] (`model.toml`);
//! - **pipeline** — [`pipeline`] (preprocess → predict → postprocess with per-item
//!   outcomes and trap isolation);
//! - **runtime** — [`runtime`] (wasmtime: compiling, sandboxing, calling plugins).
//!
//! [`tensor`] and [`outcome`] are the vocabulary every layer shares.

pub mod check;
pub mod config;
pub mod error;
pub mod http;
pub mod items;
pub mod model_config;
pub mod outcome;
pub mod pipeline;
pub mod protocol;
pub mod runtime;
pub mod server;
pub mod serving;
pub mod shutdown;
pub mod telemetry;
pub mod tensor;
