//! What one request's item costs in the plugin calls alone: the digits example's three
//! stages (preprocess → predict → postprocess), loaded as the server loads them, run on
//! one item. The idle path's cost at concurrency 1 is mostly this, beside the HTTP edge
//! that `scripts/bench-floor.sh` compares with its floor.
//!
//! Ids: `digits_pipeline/<where>/<stage>`:
//! - where: `thread` (a thread of its own: an instance thread's or the blocking pool's
//!   way, the call driven by a per-thread executor) or `runtime` (inside a task of a
//!   multi-thread tokio runtime, polled on the spot: the idle path's way);
//! - stage: `all` (the whole pipeline on one item, `PipelineInstance::run`), `preprocess`,
//!   `predict`, `postprocess` (one stage's call alone, the item lent and taken back).
//!
//! Build the plugins first (`./scripts/build-plugins.sh`), then `cargo bench --bench pipeline`.

use std::sync::Arc;
use std::time::Duration;

use common::{digits_batch, images, root};
use criterion::{criterion_group, criterion_main, Bencher, Criterion};
use tensorplug::model::tensor::{DataType, Item, Tensor};
use tensorplug::pipeline::{Everyone, LoadedModel, PipelineInstance};
use tensorplug::runtime::{on_this_runtime_thread, Runtime, StageInstance};

// `load_predict` serves the benches of one stage; this one loads whole models.
#[allow(dead_code)]
mod common;

/// One digits request's item as the edge hands it over: `input-0: FP32 [8, 8]`.
fn item() -> Item {
    let pixels: Vec<u8> = images(1).iter().flat_map(|p| p.to_le_bytes()).collect();
    vec![Tensor {
        name: "input-0".into(),
        datatype: DataType::Fp32,
        shape: vec![8, 8],
        data: pixels,
    }]
}

/// What postprocess gets for that item: predict's answer, split to one item.
fn prediction() -> Item {
    let probabilities: Vec<u8> = (0..10)
        .flat_map(|i| (if i == 3 { 0.91f32 } else { 0.01 }).to_le_bytes())
        .collect();
    vec![
        Tensor {
            name: "probabilities".into(),
            datatype: DataType::Fp32,
            shape: vec![10],
            data: probabilities,
        },
        Tensor {
            name: "label".into(),
            datatype: DataType::Int64,
            shape: vec![1],
            data: 3i64.to_le_bytes().to_vec(),
        },
    ]
}

/// The stages' instances of one pipeline instance, each callable alone.
struct Stages {
    preprocess: StageInstance,
    predict: StageInstance,
    postprocess: StageInstance,
}

impl Stages {
    fn new(model: &LoadedModel) -> Self {
        let stage = |template: Option<&Arc<tensorplug::runtime::StageTemplate>>| {
            template
                .expect("digits has every stage")
                .instantiate()
                .expect("instance")
        };
        let template = &model.template;
        Self {
            preprocess: stage(template.preprocess.as_ref()),
            predict: stage(Some(&template.predict)),
            postprocess: stage(template.postprocess.as_ref()),
        }
    }
}

/// The calls a bench id measures, on one item.
fn each_call(pipeline: &mut PipelineInstance, stages: &mut Stages, b: &mut Bencher<'_>, which: &str) {
    let pixels: Vec<u8> = images(1).iter().flat_map(|p| p.to_le_bytes()).collect();
    // What predict gets for that item: `input-0: FP32 [1, 64]`.
    let (item, batch, prediction) = (item(), digits_batch(1, &pixels), prediction());
    match which {
        "all" => b.iter(|| {
            let outcome = pipeline.run(vec![item.clone()], &Everyone);
            assert!(outcome[0].is_ok());
        }),
        "preprocess" => {
            let mut lent = item.clone();
            b.iter(|| stages.preprocess.map_items(std::iter::once(&mut lent)).expect("call"))
        }
        "predict" => b.iter(|| stages.predict.predict(batch.clone()).expect("call")),
        _ => {
            let mut lent = prediction.clone();
            b.iter(|| stages.postprocess.map_items(std::iter::once(&mut lent)).expect("call"))
        }
    }
}

fn pipeline(c: &mut Criterion) {
    let runtime = Runtime::new(None).expect("runtime");
    let model = LoadedModel::load(&runtime, &root().join("examples/models/digits"), |_| 1)
        .unwrap_or_else(|e| panic!("examples/models/digits (run ./scripts/build-plugins.sh): {e}"));
    let mut pipeline = model.template.instantiate().expect("pipeline instance");
    let mut stages = Stages::new(&model);
    // The idle path's runtime: two threads, as on the machine the figures come from.
    let server = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut group = c.benchmark_group("digits_pipeline");
    for which in ["all", "preprocess", "predict", "postprocess"] {
        group.bench_function(format!("thread/{which}"), |b| {
            each_call(&mut pipeline, &mut stages, b, which)
        });
        group.bench_function(format!("runtime/{which}"), |b| {
            // Criterion's loop runs inside the server's runtime, every call polled there
            // as the idle path polls it.
            server.block_on(async { on_this_runtime_thread(|| each_call(&mut pipeline, &mut stages, b, which)) })
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    targets = pipeline
}
criterion_main!(benches);
