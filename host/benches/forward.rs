//! The forward pass of each example graph, every way tensorplug can run it, side by side,
//! at batch 1, 8 and 32. Criterion ids are `<graph>/<path>/<batch>` (results in
//! `target/criterion/<graph>/<path>/<batch>/new/estimates.json`):
//!
//! - graphs: `digits` (the MLP: examples/models/digits and digits-onnx), `digits_cnn`
//!   (examples/models/digits-cnn), `tiny_resnet` (examples/models/tiny-resnet);
//! - paths: `wasm` (the hand-written Rust predict plugin; `wasm_c`, `wasm_cpp`: the same
//!   stage in C and C++; digits only), `native` (the same forward pass as native Rust;
//!   digits only), `tract` (tensorplug's tract backend called natively: input checks,
//!   the plan for the batch size, the copies in and out), `tract_wasi_nn` (the
//!   digits-onnx predict plugin through `wasi:nn`: the wasm call, the tensors across the
//!   sandbox twice, tract's compute), `onnxruntime` (ONNX Runtime itself through the
//!   `ort` crate, one thread, no spinning, the same inputs), `onnxruntime_wasi_nn` (the
//!   predict plugin through `wasi:nn`, the graph on tensorplug's ONNX Runtime backend);
//!   the last two only when the library is found: `TENSORPLUG_ONNXRUNTIME_LIB`, or the
//!   `onnxruntime` wheel of the test virtualenv.
//!
//! Also: what replacing a trapped instance costs (`digits_predict_instance_replacement`).
//!
//! Build the plugins first (`./scripts/build-plugins.sh`), then `cargo bench --bench forward`.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{digits_batch, images, root};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use digits_model::{forward, Weights, CLASSES, INPUTS};
use tensorplug::model::config::{GraphBackend, GraphSpec};
use tensorplug::model::tensor::{DataType, Tensor};
use tensorplug::runtime::nn::{GraphLimits, ModelGraphs, NnTensor, TensorType};
use tensorplug::runtime::{ModelShared, Runtime, StageTemplate};

mod common;
/// Where ONNX Runtime's library is (as the tests find it).
#[path = "../../tests/common/onnx.rs"]
mod onnx;

const BATCHES: [usize; 3] = [1, 8, 32];

/// The predict stage of `examples/models/<model>`, loaded as the server loads it.
fn predict_template(runtime: &Runtime, model: &str, shared: Arc<ModelShared>) -> Arc<StageTemplate> {
    common::load_predict(runtime, model, 64, shared, &[]).0
}

/// digits-onnx's predict stage in `examples/models/<model>`, running the graph `graph`.
fn graph_template(runtime: &Runtime, model: &str, graph: &str, shared: Arc<ModelShared>) -> Arc<StageTemplate> {
    common::load_predict(runtime, model, 64, shared, &[("graph".into(), graph.into())]).0
}

/// One example graph: where it is, and its input for a batch of `n`.
struct Example {
    group: &'static str,
    model: &'static str,
    graph: &'static str,
    file: &'static str,
    /// The shape of one item.
    item: &'static [usize],
    /// `n` items' values, flattened.
    input: fn(usize) -> Vec<f32>,
}

const EXAMPLES: [Example; 3] = [
    Example {
        group: "digits",
        model: "digits-onnx",
        graph: "digits",
        file: "digits.onnx",
        item: &[INPUTS],
        input: images,
    },
    Example {
        group: "digits_cnn",
        model: "digits-cnn",
        graph: "cnn",
        file: "digits-cnn.onnx",
        item: &[INPUTS],
        input: images,
    },
    Example {
        group: "tiny_resnet",
        model: "tiny-resnet",
        graph: "resnet",
        file: "tiny-resnet.onnx",
        item: &[1, 28, 28],
        input: resnet_images,
    },
];

/// `n` 28x28 images: a smooth pattern per image, in 0..1.
fn resnet_images(n: usize) -> Vec<f32> {
    (0..n * 28 * 28)
        .map(|k| {
            let (i, y, x) = (k / 784, (k / 28) % 28, k % 28);
            0.5 + 0.5 * (0.3 * x as f32 + 0.2 * y as f32 + 1.7 * i as f32).sin()
        })
        .collect()
}

fn le_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn shape(n: usize, item: &[usize]) -> Vec<usize> {
    std::iter::once(n).chain(item.iter().copied()).collect()
}

fn hand_written(c: &mut Criterion, runtime: &Runtime) -> Arc<StageTemplate> {
    let weights = Weights::from_dir(root().join("examples/models/digits")).expect("weights");
    let template = predict_template(runtime, "digits", Default::default());
    let plugins: Vec<_> = [("wasm", template.clone())]
        .into_iter()
        .chain(
            [("wasm_c", "digits-c"), ("wasm_cpp", "digits-cpp")]
                .map(|(id, model)| (id, predict_template(runtime, model, Default::default()))),
        )
        .collect();
    let mut group = c.benchmark_group("digits");
    for n in BATCHES {
        let x = images(n);
        assert_eq!(x.len(), n * INPUTS);
        group.throughput(Throughput::Elements(n as u64));
        let mut proba = vec![0.0f32; n * CLASSES];
        let mut labels = vec![0i64; n];
        group.bench_with_input(BenchmarkId::new("native", n), &n, |b, &n| {
            b.iter(|| forward(&weights, std::hint::black_box(&x), n, &mut proba, &mut labels))
        });
        let bytes = le_bytes(&x);
        for (id, template) in &plugins {
            // A fresh instance per benchmark: wit-bindgen 0.63's C++ glue leaks each call's
            // argument array (32 bytes, tests/e2e/leaks.rs), which over the millions of
            // calls of several benchmarks would reach the instance's memory limit.
            let mut instance = template.instantiate().expect("instance");
            group.bench_with_input(BenchmarkId::new(*id, n), &n, |b, &n| {
                b.iter(|| {
                    let prediction = instance
                        .predict(digits_batch(n, &bytes))
                        .expect("no trap")
                        .expect("no batch error");
                    std::hint::black_box(prediction);
                })
            });
        }
    }
    group.finish();
    template
}

fn graphs(c: &mut Criterion, runtime: &Runtime) {
    let onnxruntime = onnxruntime::Native::find();
    for example in &EXAMPLES {
        let dir = root().join("examples/models").join(example.model);
        let load = |backend| {
            let limits = GraphLimits {
                memory_bytes: 256 << 20,
                max_nodes: 10_000,
                value_bytes: 64 << 20,
            };
            let spec = GraphSpec {
                name: example.graph.into(),
                file: dir.join(example.file),
                backend,
                threads: 1,
            };
            ModelGraphs::load(&dir, &[spec], limits).unwrap_or_else(|e| panic!("{}: {e}", example.file))
        };
        let plugin = |graphs| {
            let template = graph_template(
                runtime,
                example.model,
                example.graph,
                Arc::new(ModelShared::with_graphs(graphs)),
            );
            template.instantiate().expect("instance")
        };
        let graphs = load(GraphBackend::Tract);
        let graph = graphs.get(example.graph).expect("graph").clone();
        let mut tract_plugin = plugin(graphs);
        let mut session = onnxruntime.as_ref().map(|ort| ort.session(&dir.join(example.file)));
        let mut ort_plugin = onnxruntime.as_ref().map(|_| plugin(load(GraphBackend::OnnxRuntime)));

        let mut group = c.benchmark_group(example.group);
        for n in BATCHES {
            let x = (example.input)(n);
            let dims = shape(n, example.item);
            let bytes = le_bytes(&x);
            group.throughput(Throughput::Elements(n as u64));
            group.bench_with_input(BenchmarkId::new("tract", n), &n, |b, _| {
                b.iter(|| {
                    let input = NnTensor {
                        dimensions: dims.iter().map(|&d| d as u32).collect(),
                        ty: TensorType::Fp32,
                        data: bytes.clone(),
                    };
                    let deadline = Instant::now() + Duration::from_secs(60);
                    std::hint::black_box(
                        graph
                            .run(vec![("input-0".into(), input)], deadline, 64 << 20)
                            .expect("compute"),
                    )
                })
            });
            let batch = || {
                vec![Tensor {
                    name: "input-0".into(),
                    datatype: DataType::Fp32,
                    shape: dims.iter().map(|&d| d as u64).collect(),
                    data: bytes.clone(),
                }]
            };
            group.bench_with_input(BenchmarkId::new("tract_wasi_nn", n), &n, |b, _| {
                b.iter(|| {
                    let prediction = tract_plugin.predict(batch()).expect("no trap").expect("no batch error");
                    std::hint::black_box(prediction);
                })
            });
            if let Some(session) = &mut session {
                group.bench_with_input(BenchmarkId::new("onnxruntime", n), &n, |b, _| {
                    b.iter(|| std::hint::black_box(session.run(&dims, &x)))
                });
            }
            if let Some(plugin) = &mut ort_plugin {
                group.bench_with_input(BenchmarkId::new("onnxruntime_wasi_nn", n), &n, |b, _| {
                    b.iter(|| {
                        let prediction = plugin.predict(batch()).expect("no trap").expect("no batch error");
                        std::hint::black_box(prediction);
                    })
                });
            }
        }
        group.finish();
    }
}

fn forward_pass(c: &mut Criterion) {
    let runtime = Runtime::new(None).expect("runtime");
    let template = hand_written(c, &runtime);
    graphs(c, &runtime);
    // What replacing a trapped instance costs: a fresh store, instantiation from the
    // pre-linked template, and the plugin's `init` (which reads the weights).
    c.bench_function("digits_predict_instance_replacement", |b| {
        b.iter(|| std::hint::black_box(template.instantiate().expect("instance")))
    });
}

/// ONNX Runtime called natively, for comparison.
mod onnxruntime {
    use super::*;
    use ort::session::Session;
    use ort::value::TensorRef;

    pub struct Native(&'static ort::environment::Environment);

    pub struct Graph(Session);

    impl Native {
        pub fn find() -> Option<Native> {
            // `None` says why (its benchmarks are skipped).
            let path = onnx::onnxruntime_library()?;
            // The process's only ONNX Runtime environment, tensorplug's backend's.
            tensorplug::runtime::nn::set_onnxruntime_library(path);
            let environment = tensorplug::runtime::nn::onnxruntime_environment().expect("ONNX Runtime");
            Some(Native(environment))
        }

        /// A session on one thread, without spinning, fully optimised.
        pub fn session(&self, file: &Path) -> Graph {
            let built = tensorplug::runtime::nn::onnxruntime_session(self.0)
                .and_then(|mut builder| builder.commit_from_file(file).map_err(|e| e.to_string()));
            Graph(built.unwrap_or_else(|e| panic!("{}: {e}", file.display())))
        }
    }

    impl Graph {
        /// One compute on `x` of `dims`, its outputs copied out as the backends do.
        pub fn run(&mut self, dims: &[usize], x: &[f32]) -> Vec<Vec<u8>> {
            let dims: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
            let input = TensorRef::from_array_view((dims, x)).expect("input");
            let outputs = self.0.run(ort::inputs!["input-0" => input]).expect("compute");
            outputs
                .iter()
                .map(|(_, value)| match value.try_extract_tensor::<f32>() {
                    Ok((_, data)) => le_bytes(data),
                    Err(_) => {
                        let (_, data) = value.try_extract_tensor::<i64>().expect("f32 or i64");
                        data.iter().flat_map(|v| v.to_le_bytes()).collect()
                    }
                })
                .collect()
        }
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    targets = forward_pass
}
criterion_main!(benches);
