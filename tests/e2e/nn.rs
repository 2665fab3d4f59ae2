//! `wasi:nn`: the digits MLP as an ONNX graph (model `digits-onnx`) against scikit-learn's
//! answers, and every way a graph or a plugin's use of it can go wrong: missing, escaping
//! and corrupt graphs fail their model's load (the others keep serving; `check` explains
//! them), bad inputs fail their item, and compute in a loop is cut off at the deadline.

use crate::common;
use crate::digits::{assert_batch_matches, assert_matches, assert_oracle_one_by_one, cases, Case};
// The example repository, as the digits tests serve it.
use crate::digits::repository as examples;

use std::path::{Path, PathBuf};

use common::{output, output_f32, request, TestServer};
use serde_json::{json, Value};

use crate::common::DIGITS_ONNX_INFER;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn digits_onnx_answers_the_450_oracle_requests_one_by_one() {
    let server = TestServer::start(&examples()).await;
    for body in assert_oracle_one_by_one(&server, DIGITS_ONNX_INFER).await {
        assert_eq!(body["model_name"], "digits-onnx");
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn digits_onnx_answers_batched_requests_like_digits() {
    let server = TestServer::start(&examples()).await;
    // The graph's host memory in the model's statistics, before any compute: what its
    // plan holds (the weights, packed for tract's kernels) and the model its concrete
    // plans are made from, of the order of its file's bytes.
    let file_bytes = std::fs::metadata(examples().join("digits-onnx/digits.onnx"))
        .unwrap()
        .len();
    let loaded_bytes = common::stats(&server, "digits-onnx").await["graph_bytes"]
        .as_u64()
        .unwrap();
    assert!(
        loaded_bytes > file_bytes / 2 && loaded_bytes < 4 * file_bytes,
        "{loaded_bytes} vs {file_bytes}"
    );
    let cases = cases();
    // Every image once, in requests of 32 (one predict call each) and of 7, in both shapes.
    for (size, shape8x8) in [(32, false), (7, true)] {
        for chunk in cases.chunks(size) {
            let pixels: Vec<f32> = chunk.iter().flat_map(|c| c.pixels.clone()).collect();
            let n = chunk.len() as u64;
            let shape = if shape8x8 { vec![n, 8, 8] } else { vec![n, 64] };
            let (status, body) = server
                .post_json(DIGITS_ONNX_INFER, &request("input-0", "FP32", &shape, json!(pixels)))
                .await;
            assert_eq!(status, 200, "{body}");
            assert_batch_matches(&body, chunk, &format!("{shape:?}"));
        }
    }
    // The same answers as the hand-written digits, a bad pixel included (preprocess's 400).
    let mut pixels: Vec<f32> = cases[..4].iter().flat_map(|c| c.pixels.clone()).collect();
    pixels[2 * 64 + 5] = 99.0;
    let body = request("input-0", "FP32", &[4, 64], json!(pixels));
    let (status, onnx) = server.post_json(DIGITS_ONNX_INFER, &body).await;
    let (digits_status, digits) = server.post_json(common::DIGITS_INFER, &body).await;
    assert_eq!((status, digits_status), (207, 207), "{onnx}");
    for (a, b) in onnx["results"]
        .as_array()
        .unwrap()
        .iter()
        .zip(digits["results"].as_array().unwrap())
    {
        assert_eq!(a["status"], b["status"]);
        assert_eq!(a["error"], b["error"]);
    }
    // Metadata: the same inputs and outputs as digits.
    let (_, meta) = server.get("/v2/models/digits-onnx").await;
    let (_, digits_meta) = server.get("/v2/models/digits").await;
    assert_eq!(meta["inputs"], digits_meta["inputs"]);
    assert_eq!(meta["outputs"], digits_meta["outputs"]);
    // Then the plans made concrete for the batch sizes used (32, 7, 4, and the last
    // chunks'), each of the order of the file's bytes too.
    let graph_bytes = common::stats(&server, "digits-onnx").await["graph_bytes"]
        .as_u64()
        .unwrap();
    let planned = graph_bytes - loaded_bytes;
    assert!(
        planned > file_bytes && planned < 4 * file_bytes * tensorplug::runtime::nn::MAX_CONCRETE_PLANS as u64,
        "{graph_bytes} after computes, {loaded_bytes} at load, vs {file_bytes}"
    );
    assert_eq!(common::stats(&server, "digits").await["graph_bytes"], 0);
    let metrics = common::metrics::scrape(&server).await;
    let labels = [("model", "digits-onnx"), ("version", "1")];
    assert_eq!(metrics.value("tensorplug_graph_bytes", &labels), graph_bytes as f64);
    server.stop().await;
}

/// The 450 test images with the CNN's own answers (tests/data/digits-cnn, written with
/// the graph by examples/digits-cnn/train.py).
fn cnn_cases() -> Vec<Case> {
    let oracle = std::fs::read_to_string(common::root().join("tests/data/digits-cnn/test_oracle.jsonl")).unwrap();
    cases()
        .into_iter()
        .zip(oracle.lines())
        .map(|(case, line)| {
            let o: Value = serde_json::from_str(line).unwrap();
            Case {
                pixels: case.pixels,
                predict: o["predict"].as_i64().unwrap(),
                proba: o["predict_proba"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_f64().unwrap() as f32)
                    .collect(),
            }
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn digits_cnn_matches_its_oracle_one_by_one_and_batched() {
    let server = TestServer::start(&examples()).await;
    let infer = "/v2/models/digits-cnn/infer";
    let cases = cnn_cases();
    let mlp = crate::digits::cases();
    let mut agree = 0;
    for (i, case) in cases.iter().enumerate() {
        let (status, body) = server
            .post_json(infer, &request("input-0", "FP32", &[1, 8, 8], json!(case.pixels)))
            .await;
        assert_eq!(status, 200, "{body}");
        let label = output(&body, "label")["data"][0].as_i64().unwrap();
        assert_matches(
            case,
            label,
            &output_f32(&body, "probabilities"),
            &format!("cnn image {i}"),
        );
        agree += usize::from(label == mlp[i].predict);
    }
    assert!(agree > 430, "{agree} of 450 agree with the MLP");
    assert_batches_of_32_match(&server, infer, &cases, "cnn batch").await;
    server.stop().await;
}

/// tiny-resnet's graph is initialised, not trained: its oracle is ONNX Runtime's outputs
/// on 8 fixed images (tests/data/tiny-resnet, written with the graph by
/// examples/tiny-resnet/make_onnx.py), which tensorplug must reproduce one by one and
/// batched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiny_resnet_computes_what_onnx_runtime_does_one_by_one_and_batched() {
    let oracle: Value = serde_json::from_str(
        &std::fs::read_to_string(common::root().join("tests/data/tiny-resnet/oracle.json")).unwrap(),
    )
    .unwrap();
    let images: Vec<Vec<f32>> = oracle["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|image| {
            image
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap() as f32)
                .collect()
        })
        .collect();
    let expected = |i: usize| -> (Vec<f32>, i64) {
        let proba = oracle["probabilities"][i]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap() as f32)
            .collect();
        (proba, oracle["label"][i].as_i64().unwrap())
    };
    let assert_close = |got: &[f32], want: &[f32], what: &str| {
        assert_eq!(got.len(), want.len(), "{what}");
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-4, "{what}: {got:?} vs ONNX Runtime's {want:?}");
        }
    };
    let server = TestServer::start(&examples()).await;
    let infer = "/v2/models/tiny-resnet/infer";
    for (i, image) in images.iter().enumerate() {
        let (status, body) = server
            .post_json(infer, &request("input-0", "FP32", &[1, 1, 28, 28], json!(image)))
            .await;
        assert_eq!(status, 200, "{body}");
        let (proba, label) = expected(i);
        assert_close(&output_f32(&body, "probabilities"), &proba, &format!("image {i}"));
        assert_eq!(output(&body, "label")["data"][0].as_i64().unwrap(), label, "image {i}");
    }
    let all: Vec<f32> = images.concat();
    let (status, body) = server
        .post_json(
            infer,
            &request("input-0", "FP32", &[images.len() as u64, 1, 28, 28], json!(all)),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let want: Vec<f32> = (0..images.len()).flat_map(|i| expected(i).0).collect();
    assert_close(&output_f32(&body, "probabilities"), &want, "the batch of 8");
    server.stop().await;
}

/// `cases` in requests of 32 images to `infer`, each answer matching them.
pub(crate) async fn assert_batches_of_32_match(server: &TestServer, infer: &str, cases: &[Case], context: &str) {
    for chunk in cases.chunks(32) {
        let pixels: Vec<f32> = chunk.iter().flat_map(|c| c.pixels.clone()).collect();
        let (status, body) = server
            .post_json(
                infer,
                &request("input-0", "FP32", &[chunk.len() as u64, 64], json!(pixels)),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        assert_batch_matches(&body, chunk, context);
    }
}

/// A copy of the digits-onnx model folder at `repository/name`, its `model.toml`'s graph
/// line replaced by `graphs` (e.g. `digits = "nope.onnx"`).
pub(crate) fn digits_onnx_copy(repository: &Path, name: &str, graphs: &str) -> PathBuf {
    let from = examples().join("digits-onnx");
    let dir = repository.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(&from).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
    }
    let toml = std::fs::read_to_string(from.join("model.toml"))
        .unwrap()
        .replace("name = \"digits-onnx\"", &format!("name = \"{name}\""))
        .replace("digits = \"digits.onnx\"", graphs);
    std::fs::write(dir.join("model.toml"), toml).unwrap();
    dir
}

/// A repository with one good graph model and one of each broken kind.
fn broken_graphs() -> tempfile::TempDir {
    common::require_plugins(&examples());
    let repository = tempfile::tempdir().unwrap();
    let root = repository.path();
    digits_onnx_copy(root, "good", "digits = \"digits.onnx\"");
    digits_onnx_copy(root, "missing", "digits = \"nope.onnx\"");
    digits_onnx_copy(root, "escape", "digits = \"../good/digits.onnx\"");
    let link = digits_onnx_copy(root, "symlink", "digits = \"linked.onnx\"");
    std::os::unix::fs::symlink(root.join("good/digits.onnx"), link.join("linked.onnx")).unwrap();
    let corrupt = digits_onnx_copy(root, "corrupt", "digits = \"digits.onnx\"");
    std::fs::write(corrupt.join("digits.onnx"), b"this is not a protobuf \xff\xff\xff\xff").unwrap();
    repository
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_graphs_fail_their_load_and_the_others_keep_serving() {
    let repository = broken_graphs();
    let server = TestServer::start(repository.path()).await;
    let index = common::index(&server).await;
    let entry = |name: &str| -> Value {
        index
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} not in {index}"))
    };
    assert_eq!(entry("good")["state"], "READY", "{index}");
    for (name, needles) in [
        ("missing", &["nope.onnx", "cannot open"][..]),
        ("escape", &["graphs.digits", "inside the model folder"][..]),
        ("symlink", &["linked.onnx", "outside the model folder"][..]),
        ("corrupt", &["digits.onnx", "not a valid ONNX graph"][..]),
    ] {
        let e = entry(name);
        assert_eq!(e["state"], "UNAVAILABLE", "{e}");
        let reason = e["reason"].as_str().unwrap_or_default();
        for needle in needles {
            assert!(reason.contains(needle), "{name}: {reason:?} should mention {needle:?}");
        }
    }
    assert_the_good_model_serves(&server).await;
    assert_eq!(server.get("/v2/models/corrupt/ready").await.0, 404);
    server.stop().await;
}

/// The model `good` (a copy of digits-onnx) beside the broken ones answers a digit.
async fn assert_the_good_model_serves(server: &TestServer) {
    let pixels = cases()[0].pixels.clone();
    let (status, body) = server
        .post_json(
            "/v2/models/good/infer",
            &request("input-0", "FP32", &[1, 64], json!(pixels)),
        )
        .await;
    assert_eq!(status, 200, "{body}");
}

#[test]
fn check_reports_graph_problems() {
    let repository = broken_graphs();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_tensorplug"))
        .arg("check")
        .arg(repository.path())
        .arg("--no-cache")
        .output()
        .expect("run tensorplug check");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    let line = |name: &str| {
        stdout
            .lines()
            .find(|l| l.contains(&format!("{name}:")) || l.split_whitespace().any(|w| w == name))
            .unwrap_or_else(|| panic!("no line for {name} in {stdout}"))
            .to_string()
    };
    assert!(line("good").contains("graphs: digits"), "{stdout}");
    assert!(line("missing").contains("nope.onnx"), "{stdout}");
    assert!(line("escape").contains("graphs.digits"), "{stdout}");
    assert!(line("symlink").contains("outside the model folder"), "{stdout}");
    assert!(line("corrupt").contains("not a valid ONNX graph"), "{stdout}");
}

/// The faulty plugin with the digits graph (`[graphs] digits`), a short deadline.
fn faulty_with_graph() -> tempfile::TempDir {
    let config = common::faulty_config("max_batch_size = 8", "timeout_ms = 300\ninstances = 1")
        + "\n[graphs]\ndigits = \"digits.onnx\"\n";
    let repository = common::faulty_repository(&config);
    std::fs::copy(
        examples().join("digits-onnx/digits.onnx"),
        repository.path().join("faulty/digits.onnx"),
    )
    .unwrap();
    repository
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_graph_inputs_fail_their_item_and_load_from_bytes_is_refused() {
    let repository = faulty_with_graph();
    let server = TestServer::start(repository.path()).await;
    let (status, body) = server.post_faulty(&[1.0, -21.0, 2.0, -22.0, -23.0]).await;
    assert_eq!(status, 207, "{body}");
    let results = body["results"].as_array().unwrap();
    for i in [0, 2] {
        assert_eq!(results[i]["status"], 200, "{body}");
    }
    let shape = results[1]["error"].as_str().unwrap();
    assert_eq!(results[1]["status"], 400, "{body}");
    assert!(
        shape.contains("invalid input 'input-0'") && shape.contains("[1, 63]"),
        "{shape}"
    );
    let datatype = results[3]["error"].as_str().unwrap();
    assert_eq!(results[3]["status"], 400, "{body}");
    assert!(
        datatype.contains("invalid-argument") && datatype.contains("element type I32"),
        "{datatype}"
    );
    let refused = results[4]["error"].as_str().unwrap();
    assert_eq!(results[4]["status"], 422, "{body}");
    assert!(refused.contains("load-by-name"), "{refused}");
    assert_eq!(common::stats(&server, "faulty").await["traps"], 0);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compute_in_a_loop_past_the_deadline_fails_its_item_only() {
    let repository = faulty_with_graph();
    let server = TestServer::start(repository.path()).await;
    let started = std::time::Instant::now();
    let (status, body) = server.post_faulty(&[1.0, -20.0, 3.0]).await;
    assert_eq!(status, 207, "{body}");
    let results = body["results"].as_array().unwrap();
    assert_eq!(results[0]["status"], 200, "{body}");
    assert_eq!(results[2]["status"], 200, "{body}");
    assert_eq!(results[1]["status"], 504, "{body}");
    let error = results[1]["error"].as_str().unwrap();
    assert!(error.contains("time limit of 300 ms"), "{error}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // The replaced instance runs the shared graph as before.
    let (status, body) = server.post_faulty(&[4.0, -21.0]).await;
    assert_eq!(status, 207, "{body}");
    assert_eq!(body["results"][0]["status"], 200, "{body}");
    assert_eq!(body["results"][1]["status"], 400, "{body}");
    let stats = common::stats(&server, "faulty").await;
    assert!(stats["instance_replacements"].as_u64().unwrap() >= 1, "{stats}");
    assert!(stats["timeouts"].as_u64().unwrap() >= 1, "{stats}");
    server.stop().await;
}

/// The faulty plugin with `graphs` (name, ONNX bytes) in its folder and `limits` (one
/// instance).
pub(crate) fn faulty_with_graphs(limits: &str, parameters: &str, graphs: &[(&str, Vec<u8>)]) -> tempfile::TempDir {
    faulty_with_graphs_on(None, limits, parameters, graphs)
}

/// [`faulty_with_graphs`], the graphs run by `backend` (`None`: the plain entry, tract).
fn faulty_with_graphs_on(
    backend: Option<&str>,
    limits: &str,
    parameters: &str,
    graphs: &[(&str, Vec<u8>)],
) -> tempfile::TempDir {
    let mut config = common::faulty_config("max_batch_size = 8", &format!("instances = 1\n{limits}"));
    config.push_str("\n[graphs]\n");
    for (name, _) in graphs {
        match backend {
            None => config.push_str(&format!("{name} = \"{name}.onnx\"\n")),
            Some(backend) => config.push_str(&format!(
                "{name} = {{ file = \"{name}.onnx\", backend = \"{backend}\" }}\n"
            )),
        }
    }
    if !parameters.is_empty() {
        config.push_str(&format!("\n[parameters]\n{parameters}\n"));
    }
    let repository = common::faulty_repository(&config);
    for (name, bytes) in graphs {
        std::fs::write(repository.path().join(format!("faulty/{name}.onnx")), bytes).unwrap();
    }
    repository
}

/// 200 chained [256, 1024] x [1024, 1024] MatMuls (~10 ms each): legal, and far longer
/// than 300 ms (~2 s).
pub(crate) fn heavy() -> Vec<u8> {
    common::onnx::matmul_chain(200, 1024, Some(256))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_heavy_compute_is_stopped_at_its_deadline_and_its_neighbours_answered() {
    heavy_compute_is_stopped_at_its_deadline(None).await;
}

/// The deadline test, its graph run by `backend` (`None`: tract, the plain entry).
pub(crate) async fn heavy_compute_is_stopped_at_its_deadline(backend: Option<&str>) {
    let repository = faulty_with_graphs_on(backend, "timeout_ms = 300", "", &[("heavy", heavy())]);
    let server = TestServer::start(repository.path()).await;
    // Alone: the 504 comes at the deadline, not when the compute would have ended.
    let started = std::time::Instant::now();
    let (status, body) = server.post_faulty(&[-40.0]).await;
    let took = started.elapsed();
    assert_eq!(status, 504, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap_or_default()
            .contains("time limit of 300 ms"),
        "{body}"
    );
    assert!(
        took < std::time::Duration::from_millis(300 + 250),
        "answered after {took:?}"
    );
    // Beside others: they are answered; the instance is replaced and serves again.
    let (status, body) = server.post_faulty(&[1.0, -40.0, 3.0]).await;
    assert_eq!(status, 207, "{body}");
    let results = body["results"].as_array().unwrap();
    assert_eq!(
        (results[0]["status"].as_u64(), results[2]["status"].as_u64()),
        (Some(200), Some(200)),
        "{body}"
    );
    assert_eq!(results[1]["status"], 504, "{body}");
    let (status, body) = server.post_faulty(&[5.0]).await;
    assert_eq!(status, 200, "{body}");
    let stats = common::stats(&server, "faulty").await;
    assert!(stats["instance_replacements"].as_u64().unwrap() >= 2, "{stats}");
    let metrics = common::metrics::scrape(&server).await.text;
    let stopped = metrics
        .lines()
        .find(|l| l.starts_with("tensorplug_nn_computes_stopped_total{reason=\"deadline\"}"))
        .unwrap_or_else(|| panic!("{metrics}"));
    assert!(!stopped.ends_with(" 0"), "{stopped}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_heavy_compute_in_init_fails_the_load_at_init_timeout() {
    let repository = faulty_with_graphs("init_timeout_ms = 300", "init_graph = \"heavy\"", &[("heavy", heavy())]);
    let started = std::time::Instant::now();
    let server = TestServer::start(repository.path()).await;
    let took = started.elapsed();
    let index = common::index(&server).await;
    let entry = &index[0];
    assert_eq!(entry["state"], "UNAVAILABLE", "{index}");
    let reason = entry["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("300 ms") && reason.contains("init"), "{reason}");
    // Loading the 4 MiB graph, compiling, then init stopped at 300 ms.
    assert!(took < std::time::Duration::from_secs(8), "{took:?}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_output_larger_than_the_instance_is_the_items_error() {
    output_larger_than_the_instance_is_the_items_error(None).await;
}

/// The instance memory test, its graph run by `backend` (`None`: tract).
pub(crate) async fn output_larger_than_the_instance_is_the_items_error(backend: Option<&str>) {
    // [1024, 1] x [1, 65536]: a 256 MiB output for an instance of 64 MiB.
    let repository = faulty_with_graphs_on(backend, "memory_mib = 64", "", &[("wide", common::onnx::widen(65_536))]);
    let server = TestServer::start(repository.path()).await;
    let (status, body) = server.post_faulty(&[1.0, -41.0]).await;
    assert_eq!(status, 207, "{body}");
    assert_eq!(body["results"][0]["status"], 200, "{body}");
    assert_eq!(body["results"][1]["status"], 422, "{body}");
    let error = body["results"][1]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("268435456 bytes") && error.contains("limits.memory_mib"),
        "{error}"
    );
    assert_eq!(common::stats(&server, "faulty").await["traps"], 0);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graph_bombs_and_long_graphs_fail_their_load_naming_the_limit() {
    common::require_plugins(&examples());
    let repository = tempfile::tempdir().unwrap();
    let root = repository.path();
    digits_onnx_copy(root, "good", "digits = \"digits.onnx\"");
    let huge = [1 << 20, 1 << 20];
    let bombs = [
        (
            "constant-of-shape",
            common::onnx::constant_of_shape(&huge),
            "limits.graph_memory_mib",
        ),
        ("expand", common::onnx::expand(&huge), "limits.graph_memory_mib"),
        ("range", common::onnx::range(1 << 40), "limits.graph_memory_mib"),
        (
            "constant-512mib",
            common::onnx::constant_of_shape(&[128 << 20]),
            "limits.graph_memory_mib",
        ),
        ("chain", common::onnx::chain(20_000), "limits.graph_max_nodes"),
    ];
    for (name, bytes, _) in &bombs {
        let dir = digits_onnx_copy(root, name, "digits = \"bomb.onnx\"");
        std::fs::write(dir.join("bomb.onnx"), bytes).unwrap();
    }
    let started = std::time::Instant::now();
    let server = TestServer::start(root).await;
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    let index = common::index(&server).await;
    for (name, _, limit) in &bombs {
        let entry = index.as_array().unwrap().iter().find(|e| e["name"] == *name).unwrap();
        assert_eq!(entry["state"], "UNAVAILABLE", "{entry}");
        let reason = entry["reason"].as_str().unwrap_or_default();
        assert!(
            reason.contains(limit) && reason.contains("bomb.onnx"),
            "{name}: {reason}"
        );
    }
    assert_the_good_model_serves(&server).await;
    let metrics = common::metrics::scrape(&server).await.text;
    for (limit, at_least) in [("graph_memory_mib", 4), ("graph_max_nodes", 1)] {
        let line = metrics
            .lines()
            .find(|l| l.starts_with(&format!("tensorplug_nn_graph_loads_refused_total{{limit=\"{limit}\"}}")))
            .unwrap_or_else(|| panic!("{metrics}"));
        let count: u64 = line.rsplit(' ').next().unwrap().parse().unwrap();
        assert!(count >= at_least, "{line}");
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graph_bytes_is_what_the_graph_holds() {
    // A 205-byte graph folding a 64 MiB constant at load, under a budget of 128 MiB.
    let graph = common::onnx::constant_of_shape(&[16 << 20]);
    assert!(graph.len() < 300, "{}", graph.len());
    let repository = faulty_with_graphs("graph_memory_mib = 128", "", &[("folded", graph)]);
    let server = TestServer::start(repository.path()).await;
    let bytes = common::stats(&server, "faulty").await["graph_bytes"].as_u64().unwrap();
    assert!((64 << 20..72 << 20).contains(&bytes), "{bytes}");
    let metrics = common::metrics::scrape(&server).await.text;
    let line = metrics
        .lines()
        .find(|l| l.starts_with("tensorplug_graph_bytes{"))
        .unwrap_or_else(|| panic!("{metrics}"));
    assert!(line.ends_with(&format!(" {bytes}")), "{line}");
    server.stop().await;
}
