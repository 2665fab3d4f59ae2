//! What a plugin costs in each language: the digits predict stage written in Rust, C, C++,
//! Python and JavaScript (examples/models/digits, digits-c, digits-cpp, digits-python,
//! digits-js), each loaded as the server loads it.
//!
//! Printed once per language, before criterion runs (one-shot figures, too slow to
//! repeat): the file's size, a cold compile, a compile served by the on-disk cache, and an
//! instance's linear memory and resident memory (the growth of this process's RSS over 4
//! instances, divided by 4: what an instance really touches). Then criterion: `instantiate`
//! (a new instance and its `init`, which is what replacing a trapped instance costs) and
//! `predict` at batch 1 and 32.
//!
//! Build the plugins first (`./scripts/build-plugins.sh`), then `cargo bench --bench languages`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use tensorplug::model::tensor::{DataType, Tensor};
use tensorplug::model::StageKind;
use tensorplug::runtime::{Runtime, SandboxLimits, StageTag, StageTemplate};

const LANGUAGES: [(&str, &str); 5] = [
    ("rust", "digits"),
    ("c", "digits-c"),
    ("cpp", "digits-cpp"),
    ("python", "digits-python"),
    ("js", "digits-js"),
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The first `n` test images as the predict stage's batch, `input-0: FP32 [n, 64]`.
fn batch(n: usize) -> Vec<Tensor> {
    let text = std::fs::read_to_string(root().join("tests/data/digits/test_requests.jsonl")).expect("test requests");
    let data: Vec<u8> = text
        .lines()
        .take(n)
        .flat_map(|line| {
            let request: serde_json::Value = serde_json::from_str(line).expect("json line");
            request["inputs"][0]["data"]
                .as_array()
                .expect("data")
                .iter()
                .flat_map(|v| (v.as_f64().expect("number") as f32).to_le_bytes())
                .collect::<Vec<_>>()
        })
        .collect();
    vec![Tensor {
        name: "input-0".into(),
        datatype: DataType::Fp32,
        shape: vec![n as u64, 64],
        data,
    }]
}

/// The predict stage of `examples/models/<model>`, loaded by `runtime`, and how long the
/// load (the compile, or the cache's deserialisation) took.
fn load(runtime: &Runtime, model: &str) -> (Arc<StageTemplate>, Duration) {
    let dir = root().join("examples/models").join(model);
    let tag = StageTag {
        model: model.into(),
        version: "1".into(),
        stage: "predict",
        shared: Default::default(),
    };
    let limits = SandboxLimits {
        memory_bytes: 64 << 20,
        table_elements: 10_000,
        max_handles: 128,
        call_timeout: Duration::from_secs(10),
        init_timeout: Duration::from_secs(10),
        compile_timeout: Duration::from_secs(600),
    };
    let started = Instant::now();
    let template = StageTemplate::load(
        runtime,
        StageKind::Predict,
        &dir.join("predict.wasm"),
        &dir,
        tag,
        limits,
        &[],
    )
    .unwrap_or_else(|e| panic!("{model}/predict.wasm (run ./scripts/build-plugins.sh): {e}"));
    (template, started.elapsed())
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
            let input = batch(n);
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
