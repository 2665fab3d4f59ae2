//! What a plugin costs in each language: the digits predict stage written in Rust, C, C++,
//! Python and JavaScript (examples/models/digits, digits-c, digits-cpp, digits-python,
//! digits-js), each loaded as the server loads it.
//!
//! Printed once per language, before criterion runs (one-shot figures, too slow to
//! repeat): the file's size, a cold compile, a compile served by the on-disk cache, and an
//! instance's linear memory and resident memory (the growth of this process's RSS over 4
//! instances, divided by 4: what an instance really touches). Then criterion: `instantiate`
//! (a new instance and its `init`, which is what replacing a trapped instance costs) and
//! `predict` at batch 1 and 32. `python_nn` is the Python plugin running the digits ONNX
//! graph through `wasi:nn` (the predict stage of digits-mixed) instead of its own loop.
//!
//! Build the plugins first (`./scripts/build-plugins.sh`), then `cargo bench --bench languages`.

use std::sync::Arc;
use std::time::Duration;

use common::{digits_batch, images, root};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use tensorplug::model::config::GraphSpec;
use tensorplug::runtime::nn::{GraphLimits, ModelGraphs};
use tensorplug::runtime::{ModelShared, Runtime, StageTemplate};

mod common;

const LANGUAGES: [(&str, &str); 6] = [
    ("rust", "digits"),
    ("c", "digits-c"),
    ("cpp", "digits-cpp"),
    ("python", "digits-python"),
    ("js", "digits-js"),
    ("python_nn", "digits-mixed"),
];

/// What the model's stages share: digits-mixed's graph and its `graph` parameter.
fn shared_and_parameters(model: &str) -> (Arc<ModelShared>, Vec<(String, String)>) {
    if model != "digits-mixed" {
        return (Default::default(), Vec::new());
    }
    let dir = root().join("examples/models").join(model);
    let limits = GraphLimits {
        memory_bytes: 256 << 20,
        max_nodes: 10_000,
        value_bytes: 64 << 20,
    };
    let graphs =
        ModelGraphs::load(&dir, &[GraphSpec::tract("digits", dir.join("digits.onnx"))], limits).expect("digits.onnx");
    (
        Arc::new(ModelShared::with_graphs(graphs)),
        vec![("graph".into(), "digits".into())],
    )
}

/// The predict stage of `examples/models/<model>`, loaded by `runtime` with what the
/// JavaScript plugin needs under steady load (see its model.toml), and the load's time.
fn load(runtime: &Runtime, model: &str) -> (Arc<StageTemplate>, Duration) {
    let (shared, parameters) = shared_and_parameters(model);
    common::load_predict(runtime, model, 128, shared, &parameters)
}

/// This process's resident memory, in bytes.
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn languages(c: &mut Criterion) {
    let cache = tempfile::tempdir().expect("cache folder");
    let mut loaded = Vec::new();
    eprintln!(
        "language  component_bytes  cold_compile_s  cached_compile_s  linear_memory_mib  resident_mib_per_instance"
    );
    for (language, model) in LANGUAGES {
        let size = std::fs::metadata(root().join("examples/models").join(model).join("predict.wasm"))
            .map(|m| m.len())
            .unwrap_or(0);
        let (_, cold) = load(&Runtime::new(None).expect("runtime"), model);
        // Fills the cache, then a runtime of its own loads from it.
        load(&Runtime::new(Some(cache.path())).expect("runtime"), model);
        let (template, cached) = load(&Runtime::new(Some(cache.path())).expect("runtime"), model);
        let before = resident_bytes();
        let instances: Vec<_> = (0..4).map(|_| template.instantiate().expect("instance")).collect();
        let resident = resident_bytes().saturating_sub(before) / 4;
        let linear = instances[0].memory_bytes();
        drop(instances);
        eprintln!(
            "{language:<9} {size:>15} {:>15.3} {:>17.3} {:>18.1} {:>26.1}",
            cold.as_secs_f64(),
            cached.as_secs_f64(),
            linear as f64 / (1 << 20) as f64,
            resident as f64 / (1 << 20) as f64,
        );
        loaded.push((language, template));
    }

    let mut group = c.benchmark_group("plugin_language");
    group.sample_size(20).measurement_time(Duration::from_secs(4));
    for (language, template) in &loaded {
        group.bench_function(BenchmarkId::new("instantiate", language), |b| {
            b.iter(|| std::hint::black_box(template.instantiate().expect("instance")))
        });
        let mut instance = template.instantiate().expect("instance");
        for n in [1usize, 32] {
            let bytes: Vec<u8> = images(n).iter().flat_map(|v| v.to_le_bytes()).collect();
            let input = digits_batch(n, &bytes);
            group.bench_function(BenchmarkId::new(format!("predict_{n}"), language), |b| {
                b.iter(|| {
                    let prediction = instance
                        .predict(input.clone())
                        .expect("no trap")
                        .expect("no batch error");
                    std::hint::black_box(prediction);
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, languages);
criterion_main!(benches);
