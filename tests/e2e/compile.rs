//! End to end: compiling plugins at load. Each stage's compile time is on `/metrics`
//! (`tensorplug_model_compile_seconds`), and a model whose compile runs past its
//! `limits.compile_timeout_ms` fails its load with a reason naming that key, while the
//! server serves its other models.

use crate::common;

use common::{faulty_config, output_f32, TestServer};
use tensorplug::app::config::ServeConfig;

const COMPILE_SECONDS: &str = "tensorplug_model_compile_seconds";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_stage_of_the_examples_reports_its_compile_time() {
    let server = TestServer::start(&common::examples()).await;
    let page = common::metrics::scrape(&server).await;
    let stages: Vec<(String, String)> = page
        .scrape
        .samples
        .iter()
        .filter(|s| s.metric == COMPILE_SECONDS)
        .map(|s| {
            (
                s.labels.get("model").unwrap().to_owned(),
                s.labels.get("stage").unwrap().to_owned(),
            )
        })
        .collect();
    for model in ["digits", "digits-cnn", "digits-onnx"] {
        assert!(
            stages.iter().any(|(m, stage)| m == model && stage == "predict"),
            "{model}: {stages:?}"
        );
    }
    assert!(
        stages.iter().any(|(m, stage)| m == "digits" && stage == "preprocess"),
        "{stages:?}"
    );
    for (model, stage) in &stages {
        let seconds = page.value(COMPILE_SECONDS, &[("model", model), ("version", "1"), ("stage", stage)]);
        eprintln!("{model} {stage}: compiled in {seconds:.3} s");
        // A compile or a load from the tests' shared cache: either is timed, and well
        // within the default limit of 300 s.
        assert!(seconds > 0.0 && seconds < 120.0, "{model} {stage}: {seconds} s");
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compile_past_its_limit_fails_that_load_naming_the_key() {
    let repository = common::faulty_repository(&faulty_config("max_batch_size = 4", "compile_timeout_ms = 1"));
    let other = repository.path().join("other");
    std::fs::create_dir(&other).unwrap();
    // Other bytes (a custom section of its own): a stage with the same bytes would wait
    // for faulty's compile, or lend it its own, whichever loaded first.
    let mut bytes = std::fs::read(repository.path().join("faulty/predict.wasm")).unwrap();
    bytes.extend_from_slice(b"\x00\x06\x05other");
    std::fs::write(other.join("predict.wasm"), bytes).unwrap();
    std::fs::write(other.join("model.toml"), faulty_config("max_batch_size = 4", "")).unwrap();
    // Uncached: a load from the cache could beat even 1 ms.
    let server = TestServer::start_with(ServeConfig::for_repository(repository.path())).await;

    let (status, body) = server.post_faulty(&[1.0]).await;
    assert!(status >= 400, "{status}: {body}");
    let index = common::index(&server).await;
    let rows = index.as_array().unwrap();
    let entry = rows.iter().find(|row| row["name"] == "faulty").unwrap();
    assert_eq!(entry["state"], "UNAVAILABLE", "{entry}");
    let reason = entry["reason"].as_str().unwrap();
    assert!(
        reason.contains("compiling took longer than 1 ms (limits.compile_timeout_ms)"),
        "{reason}"
    );
    let page = common::metrics::scrape(&server).await;
    let failed = [("model", "faulty"), ("kind", "load"), ("outcome", "failed")];
    assert_eq!(page.value("tensorplug_model_loads_total", &failed), 1.0);

    let (status, body) = server.post_items("other", &[3.0]).await;
    assert_eq!((status, output_f32(&body, "y")), (200, vec![6.0]), "{body}");
    server.stop().await;
}
