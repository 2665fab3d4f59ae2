//! Plugins written in languages other than Rust, served end to end: the digits models
//! whose predict stage is C (examples/digits-c) or C++ (examples/digits-cpp), wasip1
//! reactor modules the host makes components at load, against scikit-learn's answers,
//! and an item the plugin itself rejects failing alone; and the C and C++ fault plugins
//! (tests/plugins/faulty-c): an abort or running out of memory fails its item alone and
//! the instance is replaced, and the SDKs' `wasi:nn` helpers answer like digits-onnx.

use crate::common;
use crate::digits::{assert_matches, assert_oracle_one_by_one, cases};

use std::path::Path;
use std::time::{Duration, Instant};

use common::{output, output_f32, request, TestServer};
use serde_json::{json, Value};

/// A repository holding only a copy of the model folder `from`, deleted on drop.
pub(crate) fn repository_of(from: &Path) -> tempfile::TempDir {
    let repository = tempfile::tempdir().unwrap();
    copy_model(from, repository.path());
    repository
}

/// Copies the model folder `from` into `repository` (under its own name).
fn copy_model(from: &Path, repository: &Path) {
    let to = repository.join(from.file_name().unwrap());
    std::fs::create_dir(&to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, to.join(path.file_name().unwrap())).unwrap();
    }
}

/// Serves the model folder `model` alone and checks the 450 oracle requests, and what the
/// plugin declared at init.
pub(crate) async fn serves_the_oracle(model: &str) {
    let repository = repository_of(&common::examples().join(model));
    let server = TestServer::start(repository.path()).await;
    let answers = assert_oracle_one_by_one(&server, &format!("/v2/models/{model}/infer")).await;
    assert_eq!(answers[0]["model_name"], model);
    let (status, meta) = server.get(&format!("/v2/models/{model}")).await;
    assert_eq!(status, 200, "{meta}");
    assert_eq!(meta["parameters"]["labels"], "0,1,2,3,4,5,6,7,8,9", "{meta}");
    server.stop().await;
}

/// A batch of 4 whose item 2 is blank: it passes preprocess (every pixel is in range) and
/// the predict plugin answers it with its own 422; its neighbours get their digits. The
/// plugin counts blank images and observes batch sizes in its own metrics.
pub(crate) async fn rejects_a_blank_item_alone(model: &str) {
    let repository = repository_of(&common::examples().join(model));
    let server = TestServer::start(repository.path()).await;
    let infer = format!("/v2/models/{model}/infer");
    let cases = cases();
    let mut pixels: Vec<f32> = cases[..4].iter().flat_map(|c| c.pixels.clone()).collect();
    pixels[2 * 64..3 * 64].fill(0.0);
    let (status, body) = server
        .post_json(&infer, &request("input-0", "FP32", &[4, 64], json!(pixels)))
        .await;
    assert_eq!(status, 207, "{body}");
    let results = body["results"].as_array().unwrap();
    assert_eq!(results.len(), 4);
    for (i, result) in results.iter().enumerate() {
        if i == 2 {
            assert_eq!(result["status"], 422, "{result}");
            let error = result["error"].as_str().unwrap();
            assert!(error.contains("every pixel is 0"), "{error}");
        } else {
            assert_eq!(result["status"], 200, "{result}");
            let label = output(result, "label")["data"][0].as_i64().unwrap();
            assert_matches(&cases[i], label, &output_f32(result, "probabilities"), "neighbour");
        }
    }
    // Alone, the blank image is the whole request's 422.
    let (status, body) = server
        .post_json(&infer, &request("input-0", "FP32", &[1, 64], json!(vec![0.0f32; 64])))
        .await;
    assert_eq!(status, 422, "{body}");
    assert!(body["error"].as_str().unwrap().contains("every pixel is 0"), "{body}");
    // The plugin's own metrics (the SDK's metric helpers): one blank image per request,
    // and the size of each predict call.
    let metrics = common::metrics::scrape(&server).await;
    let labels = [("model", model), ("version", "1")];
    assert_eq!(metrics.value("tensorplug_plugin_blank_images_total", &labels), 2.0);
    assert_eq!(metrics.histogram_count("tensorplug_plugin_batch_size", &labels), 2.0);
    assert_eq!(metrics.value("tensorplug_plugin_batch_size_sum", &labels), 5.0);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_predict_matches_the_oracle_on_all_450_requests() {
    serves_the_oracle("digits-c").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_item_the_c_plugin_rejects_fails_alone() {
    rejects_a_blank_item_alone("digits-c").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpp_predict_matches_the_oracle_on_all_450_requests() {
    serves_the_oracle("digits-cpp").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_item_the_cpp_plugin_rejects_fails_alone() {
    rejects_a_blank_item_alone("digits-cpp").await;
}

/// A repository holding the fault plugin `model` (faulty-c or faulty-cpp of tests/models);
/// with `graph`, its model.toml also names the digits graph (`[graphs] digits`, a copy of
/// digits-onnx's) and the repository holds digits-onnx beside it.
fn fault_repository(model: &str, graph: bool) -> tempfile::TempDir {
    let repository = tempfile::tempdir().unwrap();
    let folder = common::root().join("tests/models").join(model);
    common::require_plugins(folder.parent().unwrap());
    copy_model(&folder, repository.path());
    if graph {
        let to = repository.path().join(model);
        let config = std::fs::read_to_string(to.join("model.toml")).unwrap() + "\n[graphs]\ndigits = \"digits.onnx\"\n";
        std::fs::write(to.join("model.toml"), config).unwrap();
        std::fs::copy(
            common::examples().join("digits-onnx/digits.onnx"),
            to.join("digits.onnx"),
        )
        .unwrap();
        copy_model(&common::examples().join("digits-onnx"), repository.path());
    }
    repository
}

/// Each item's status of a 207 (or of a whole answer).
fn statuses(status: u16, body: &Value) -> Vec<u64> {
    match body["results"].as_array() {
        Some(results) => results.iter().map(|r| r["status"].as_u64().unwrap()).collect(),
        None => vec![u64::from(status)],
    }
}

/// How long a request that follows a trap takes to answer 200: the replacement of the
/// trapped instance is on its path.
async fn replacement_time(server: &TestServer, model: &str) -> Duration {
    let started = Instant::now();
    let (status, body) = server.post_items(model, &[4.0]).await;
    let took = started.elapsed();
    assert_eq!(status, 200, "the instance was replaced: {body}");
    assert_eq!(output_f32(&body, "y"), vec![8.0]);
    took
}

/// The batch `[1, -1, 3, -5]` in one request: the abort fails its item with a 500
/// naming the trap, the plugin's own rejection is that item's 422, the neighbours get
/// 2x; running out of memory (-3) fails alone too, and after each the next request is
/// served by a new instance (the model counts the traps and the replacements).
async fn aborts_and_oom_fail_their_item_alone(model: &str) {
    let repository = fault_repository(model, false);
    let server = TestServer::start(repository.path()).await;
    let (status, body) = server.post_items(model, &[1.0, -1.0, 3.0, -5.0]).await;
    assert_eq!(status, 207, "{body}");
    assert_eq!(statuses(status, &body), vec![200, 500, 200, 422], "{body}");
    let results = body["results"].as_array().unwrap();
    assert_eq!(output_f32(&results[0], "y"), vec![2.0]);
    assert_eq!(output_f32(&results[2], "y"), vec![6.0]);
    let trap = results[1]["error"].as_str().unwrap();
    assert!(trap.contains("trap") || trap.contains("unreachable"), "{trap}");
    let rejected = results[3]["error"].as_str().unwrap();
    assert!(rejected.contains(&format!("{model}: item rejected")), "{rejected}");
    let after_batch = replacement_time(&server, model).await;

    // A trap alone, then the request that meets its replacement.
    let (status, body) = server.post_items(model, &[-1.0]).await;
    assert_eq!(status, 500, "{body}");
    let after_abort = replacement_time(&server, model).await;

    let (status, body) = server.post_items(model, &[2.0, -3.0]).await;
    assert_eq!(statuses(status, &body), vec![200, 500], "{body}");
    let results = body["results"].as_array().unwrap();
    assert_eq!(output_f32(&results[0], "y"), vec![4.0]);
    let after_oom = replacement_time(&server, model).await;
    let stats = common::stats(&server, model).await;
    assert!(stats["traps"].as_u64().unwrap() >= 3, "{stats}");
    assert!(stats["instance_replacements"].as_u64().unwrap() >= 3, "{stats}");
    assert_eq!(stats["instances_live"], stats["instances"], "{stats}");
    println!(
        "{model}: trap-to-replacement (first request after the trap): after the batch {after_batch:?}, \
         after an abort {after_abort:?}, after running out of memory {after_oom:?}"
    );
    server.stop().await;
}

/// The probabilities `model` gives for the fault plugins' image (pixel i = 7i mod 17).
async fn digits_onnx_probabilities(server: &TestServer) -> Vec<f32> {
    let pixels: Vec<f32> = (0..64).map(|i| ((7 * i) % 17) as f32).collect();
    let (status, body) = server
        .post_json(
            "/v2/models/digits-onnx/infer",
            &request("input-0", "FP32", &[1, 64], json!(pixels)),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    output_f32(&body, "probabilities")
}

/// The SDK's graph helpers end to end: codes -40..-49 give the digits graph's
/// probabilities for a fixed image, which must equal digits-onnx's for the same image; an
/// input of the wrong shape is the item's 400 (the host's refusal), one of a datatype
/// wasi:nn cannot carry the item's 400 (the SDK's); the neighbours are served.
async fn wasi_nn_answers_like_digits_onnx(model: &str) {
    let repository = fault_repository(model, true);
    let server = TestServer::start(repository.path()).await;
    let expected = digits_onnx_probabilities(&server).await;
    let codes: Vec<f32> = (0..10).map(|k| -40.0 - k as f32).collect();
    let (status, body) = server.post_items(model, &codes).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        output_f32(&body, "y"),
        expected,
        "{model} through wasi:nn vs digits-onnx"
    );

    let (status, body) = server.post_items(model, &[-60.0, 1.0, -61.0]).await;
    assert_eq!(statuses(status, &body), vec![400, 200, 400], "{body}");
    let results = body["results"].as_array().unwrap();
    let shape = results[0]["error"].as_str().unwrap();
    assert!(shape.contains("wasi:nn invalid-argument"), "{shape}");
    let datatype = results[2]["error"].as_str().unwrap();
    assert!(datatype.contains("cannot carry"), "{datatype}");
    assert_eq!(output_f32(&results[1], "y"), vec![2.0]);
    server.stop().await;

    // Without `[graphs]` there is no graph to load: the model's fault, a 500.
    let repository = fault_repository(model, false);
    let server = TestServer::start(repository.path()).await;
    let (status, body) = server.post_items(model, &[-40.0]).await;
    assert_eq!(status, 500, "{body}");
    assert!(body["error"].as_str().unwrap().contains("wasi:nn not-found"), "{body}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_or_oom_in_a_c_plugin_fails_its_item_alone() {
    aborts_and_oom_fail_their_item_alone("faulty-c").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_or_oom_in_a_cpp_plugin_fails_its_item_alone() {
    aborts_and_oom_fail_their_item_alone("faulty-cpp").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_c_sdk_runs_wasi_nn_graphs_like_digits_onnx() {
    wasi_nn_answers_like_digits_onnx("faulty-c").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cpp_sdk_runs_wasi_nn_graphs_like_digits_onnx() {
    wasi_nn_answers_like_digits_onnx("faulty-cpp").await;
}

/// The C plugin held to the limits the Rust plugins are, each fault in a batch with
/// healthy neighbours: a loop and a 3 s sleep end at the 1 s deadline (504), unbounded
/// recursion traps (500), 1 MiB on stdout and stderr fails nothing, and the sandbox's
/// walls hold (no file outside the model folder, no environment); then a request is
/// answered by the recovered (or replaced) instance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_c_plugin_is_held_to_every_limit() {
    let repository = fault_repository("faulty-c", false);
    let server = TestServer::start(repository.path()).await;
    for (fault, status, says) in [
        (-2.0, 504, "exceeded its time limit"),
        (-9.0, 504, "exceeded its time limit"),
        (-4.0, 500, "trapped"),
        (-70.0, 422, "faulty-c walls: "),
    ] {
        let started = std::time::Instant::now();
        let (code, body) = server.post_items("faulty-c", &[1.0, fault, 3.0]).await;
        let took = started.elapsed();
        assert_eq!(code, 207, "fault {fault}: {body}");
        assert_eq!(statuses(code, &body), [200, status, 200], "fault {fault}: {body}");
        let error = body["results"][1]["error"].as_str().unwrap();
        assert!(error.contains(says), "fault {fault}: {error}");
        assert!(!error.contains("BREACH"), "{error}");
        eprintln!(
            "faulty-c: fault {fault} answered in {took:?}: {}",
            &error[..error.len().min(160)]
        );
        assert!(took < Duration::from_millis(2500), "fault {fault}: {took:?}");
        let (code, body) = server.post_items("faulty-c", &[5.0]).await;
        assert_eq!(code, 200, "after fault {fault}: {body}");
    }
    let (code, body) = server.post_items("faulty-c", &[1.0, -11.0, 3.0]).await;
    assert_eq!(code, 200, "a flood of output fails nothing: {body}");
    let (_, body) = server.post_items("faulty-c", &[1.0, -70.0]).await;
    let walls = body["results"][1]["error"].as_str().unwrap();
    for met in [
        "no /etc/passwd",
        "no /model/../../etc/passwd",
        "environment: 0 variables",
    ] {
        assert!(walls.contains(met), "{met} in {walls}");
    }
    server.stop().await;
}
