//! tensorplug: an inference server whose models are sandboxed WebAssembly plugins.
//!
//! Layers, top to bottom; a module imports only from the layers below it (the test
//! `layers_import_downwards` below checks it), and the files inside one import each other
//! without circles (`modules_import_without_circles`):
//!
//! | layer | owns |
//! | --- | --- |
//! | [`app`] | the command line, server start-up and graceful shutdown, logging, `check` |
//! | [`batch`] | `tensorplug infer`: batch inference over JSONL files, against a server (as a REST or gRPC client) or in-process |
//! | [`http`], [`grpc`] | the edges, side by side (neither imports the other): REST (routes, connections and their limits, the HTTP status mapping) and gRPC (the inference service, health, reflection, the gRPC status mapping) |
//! | [`api`] | what every edge asks of the server, independent of its wire format, and [`api::ServeError`] |
//! | [`protocol`] | the Open Inference Protocol's wire format: request and response bodies |
//! | [`serving`] | models in service: repository, batcher, instance threads, request ↔ items |
//! | [`pipeline`] | loading a model; preprocess → predict → postprocess with per-item outcomes and trap bisection |
//! | [`runtime`] | wasmtime: compiling, sandboxing and calling plugins |
//! | [`traces`] | distributed tracing: W3C context in, the serving path's spans, OTLP out (every layer above may name it) |
//! | [`model`] | the shared vocabulary: tensors, item outcomes, `model.toml`, stage kinds |

pub mod api;
pub mod app;
pub mod batch;
pub mod grpc;
pub mod http;
pub mod model;
pub mod nats;
pub mod pipeline;
pub mod protocol;
pub mod runtime;
pub mod serving;
pub mod sync;
pub mod traces;

#[cfg(test)]
mod layers;
