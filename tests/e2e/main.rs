//! End-to-end tests: the real server on 127.0.0.1:0 (in this process, or the real binary
//! as a child), real plugins built from examples/ and tests/plugins/, real HTTP. One test binary, so the
//! host is linked once for all of them.

#[path = "../common/mod.rs"]
mod common;

mod batch;
mod batch_nats;
mod batching;
mod check;
mod compat;
mod compile;
mod conformance;
mod deadlines;
mod deploy;
mod digits;
mod docs;
mod failures;
mod fairness;
mod faults;
mod grpc;
mod grpc_edge;
mod interpreted;
mod languages;
mod leaks;
mod logs;
mod metadata;
mod metrics;
mod metrics_hostile;
mod minilm;
mod mixed;
mod nats;
mod new;
mod nn;
mod nn_onnxruntime;
mod observability;
mod repository;
mod residency;
mod sandbox;
mod shutdown;
mod special_files;
mod traces;
