//! The digits forward pass: native Rust against the wasm `predict` call through the host
//! (lowering the batch into the sandbox, the plugin's simd128 forward pass, lifting the
//! outputs back), for batch sizes 1, 8 and 32; and the same MLP as an ONNX graph, run by
//! tract natively (`tract`) and from the digits-onnx predict plugin through `wasi:nn`
//! (`wasm_nn`: the wasm call, the tensors across the sandbox twice, tract's compute).
//!
//! The same predict stage written in C and C++ (`wasm_c`, `wasm_cpp`: examples/digits-c
//! and digits-cpp, wasip1 modules the host makes components) runs beside the Rust one.
//!
//! Also: what replacing a trapped instance costs.
//!
//! Build the plugins first (`./scripts/build-plugins.sh`), then `cargo bench --bench forward`.

use std::sync::Arc;

use common::{digits_batch, images, root};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use digits_model::{forward, Weights, CLASSES, INPUTS};
use tensorplug::runtime::nn::{GraphLimits, ModelGraphs, NnTensor, TensorType};
use tensorplug::runtime::{ModelShared, Runtime, StageTemplate};

mod common;

/// The predict stage of `examples/models/<model>`, loaded as the server loads it.
fn predict_template(runtime: &Runtime, model: &str, shared: Arc<ModelShared>) -> Arc<StageTemplate> {
    common::load_predict(runtime, model, 64, shared, &[]).0
}

fn forward_pass(c: &mut Criterion) {
    let model_dir = root().join("examples/models/digits");
    let weights = Weights::from_dir(&model_dir).expect("weights");
    let runtime = Runtime::new(None).expect("runtime");
    let template = predict_template(&runtime, "digits", Default::default());
    // The predict plugins called alike: Rust, then the same stage in C and C++; the
    // digits-onnx one joins them below.
    let mut plugins: Vec<_> = [("wasm", template.clone())]
        .into_iter()
        .chain(
            [("wasm_c", "digits-c"), ("wasm_cpp", "digits-cpp")]
                .map(|(id, model)| (id, predict_template(&runtime, model, Default::default()))),
        )
        .map(|(id, template)| (id, template.instantiate().expect("instance")))
        .collect();

    // digits-onnx: its graph, loaded once as the server does, and its predict plugin.
    let onnx_dir = root().join("examples/models/digits-onnx");
    let graph_limits = GraphLimits {
        memory_bytes: 256 << 20,
        max_nodes: 10_000,
        value_bytes: 64 << 20,
    };
    let graphs = ModelGraphs::load(
        &onnx_dir,
        &[("digits".into(), onnx_dir.join("digits.onnx"))],
        graph_limits,
    )
    .expect("digits.onnx");
    let graph = graphs.get("digits").expect("graph").clone();
    let onnx_template = predict_template(&runtime, "digits-onnx", Arc::new(ModelShared::with_graphs(graphs)));
    plugins.push(("wasm_nn", onnx_template.instantiate().expect("instance")));

    let mut group = c.benchmark_group("digits_forward");
    for n in [1usize, 8, 32] {
        let x = images(n);
        assert_eq!(x.len(), n * INPUTS);
        group.throughput(Throughput::Elements(n as u64));
        let mut proba = vec![0.0f32; n * CLASSES];
        let mut labels = vec![0i64; n];
        group.bench_with_input(BenchmarkId::new("native", n), &n, |b, &n| {
            b.iter(|| forward(&weights, std::hint::black_box(&x), n, &mut proba, &mut labels))
        });
        let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
        for (id, instance) in &mut plugins {
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
        group.bench_with_input(BenchmarkId::new("tract", n), &n, |b, &n| {
            b.iter(|| {
                let input = NnTensor {
                    dimensions: vec![n as u32, INPUTS as u32],
                    ty: TensorType::Fp32,
                    data: bytes.clone(),
                };
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
                std::hint::black_box(
                    graph
                        .run(vec![("input-0".into(), input)], deadline, 64 << 20)
                        .expect("compute"),
                )
            })
        });
    }
    group.finish();

    // What replacing a trapped instance costs: a fresh store, instantiation from the
    // pre-linked template, and the plugin's `init` (which reads the weights).
    c.bench_function("digits_predict_instance_replacement", |b| {
        b.iter(|| std::hint::black_box(template.instantiate().expect("instance")))
    });
}

criterion_group!(benches, forward_pass);
criterion_main!(benches);
