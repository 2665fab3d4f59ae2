//! What the benchmarks share: the repository's paths, the digits test images, and a
//! predict stage loaded as the server loads it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tensorplug::model::tensor::{DataType, Tensor};
use tensorplug::model::StageKind;
use tensorplug::runtime::{ModelShared, Runtime, SandboxLimits, StageTag, StageTemplate};

/// The server's allocator (host/Cargo.toml's `jemalloc` feature), so that what the
/// benchmarks time allocates as the server does.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The first `n` test images, flattened (64 pixels each).
pub fn images(n: usize) -> Vec<f32> {
    let text = std::fs::read_to_string(root().join("tests/data/digits/test_requests.jsonl")).expect("test requests");
    text.lines()
        .take(n)
        .flat_map(|line| {
            let request: serde_json::Value = serde_json::from_str(line).expect("json line");
            request["inputs"][0]["data"]
                .as_array()
                .expect("data")
                .iter()
                .map(|v| v.as_f64().expect("number") as f32)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The predict stage's batch of `n` images as little-endian bytes: `input-0: FP32 [n, 64]`.
pub fn digits_batch(n: usize, bytes: &[u8]) -> Vec<Tensor> {
    vec![Tensor {
        name: "input-0".into(),
        datatype: DataType::Fp32,
        shape: vec![n as u64, 64],
        data: bytes.to_vec(),
    }]
}

/// The predict stage of the model folder `examples/models/<model>` with `memory_mib` of
/// linear memory, loaded by `runtime` as the server loads it, and how long the load (a
/// compile, or the cache's deserialisation) took.
pub fn load_predict(
    runtime: &Runtime,
    model: &str,
    memory_mib: usize,
    shared: Arc<ModelShared>,
    parameters: &[(String, String)],
) -> (Arc<StageTemplate>, Duration) {
    let dir = root().join("examples/models").join(model);
    let tag = StageTag {
        model: model.into(),
        version: "1".into(),
        stage: "predict",
        shared,
    };
    let limits = SandboxLimits {
        memory_bytes: memory_mib << 20,
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
        parameters,
    )
    .unwrap_or_else(|e| panic!("{model}/predict.wasm (run ./scripts/build-plugins.sh): {e}"));
    (template, started.elapsed())
}
