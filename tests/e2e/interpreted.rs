//! Plugins written in Python (componentize-py) and JavaScript (componentize-js), served end
//! to end: 13-19 MB components that embed their interpreter. The digits models whose
//! predict stage is Python or JavaScript against scikit-learn's answers, an item each
//! plugin rejects failing alone, and every way such a plugin can fail — an exception in
//! the SDK, an exception past it, a loop past the deadline, memory running out, an output
//! past the model's answer cap — failing only the item that caused it while its
//! neighbours get their answers, the server's memory (measured on the real binary) staying
//! within bounds, and the next request being served.

use std::time::{Duration, Instant};

use crate::common;
use crate::languages::{
    a_huge_output_fails_alone, a_memory_bomb_is_bounded, assert_only_the_middle_failed, rejects_a_blank_item_alone,
    repository_of, serves_the_oracle, Replaced,
};

use common::{output_f32, request, TestServer};
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_predict_matches_the_oracle_on_all_450_requests() {
    serves_the_oracle("digits-python").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_item_the_python_plugin_rejects_fails_alone() {
    rejects_a_blank_item_alone("digits-python").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn javascript_predict_matches_the_oracle_on_all_450_requests() {
    serves_the_oracle("digits-js").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_item_the_javascript_plugin_rejects_fails_alone() {
    rejects_a_blank_item_alone("digits-js").await;
}

/// Posts `values` as one request of `x: FP32 [N, 1]` to the faulty model `model`.
async fn post_x(server: &TestServer, model: &str, values: &[f32]) -> (u16, Value) {
    let body = request("x", "FP32", &[values.len() as u64, 1], json!(values));
    server.post_json(&format!("/v2/models/{model}/infer"), &body).await
}

/// Every fault of the language's faulty plugin, each in a batch with healthy neighbours,
/// each followed by a request that must be answered (the instance recovered or was
/// replaced). Prints how long that next answer took.
async fn each_failure_fails_its_item_alone(language: &str, uncaught: &str, past_the_sdk: &str, out_of_memory: &str) {
    let model = format!("faulty-{language}");
    let repository = repository_of(&common::root().join("tests/models").join(&model));
    let server = TestServer::start(repository.path()).await;

    // A refusal and an exception in one batch: the refusal keeps its 422, the exception
    // becomes the item's 500, and the healthy items are answered.
    let (status, body) = post_x(&server, &model, &[1.0, -1.0, 3.0, -5.0]).await;
    assert_eq!(status, 207, "{body}");
    let statuses: Vec<_> = body["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].clone())
        .collect();
    assert_eq!(statuses, [200, 500, 200, 422], "{body}");
    assert!(
        body["results"][1]["error"].as_str().unwrap().contains(uncaught),
        "{body}"
    );
    assert!(
        body["results"][3]["error"].as_str().unwrap().contains("item rejected"),
        "{body}"
    );
    assert_eq!(output_f32(&body["results"][2], "y"), vec![6.0]);

    // 1 MiB printed to stdout and stderr: the host keeps 64 KiB and drops the rest (the
    // stream stays open, so `print` does not fail the item), and the item is answered.
    let (status, body) = post_x(&server, &model, &[1.0, -11.0, 3.0]).await;
    assert_eq!(status, 200, "a flood of output fails nothing: {body}");
    assert_eq!(output_f32(&body, "y"), vec![2.0, -22.0, 6.0]);

    for (fault, status, says) in [
        (-71.0, 500, past_the_sdk),
        (-3.0, 500, out_of_memory),
        (-2.0, 504, "exceeded its time limit"),
    ] {
        let (code, body) = post_x(&server, &model, &[1.0, fault, 3.0]).await;
        assert_eq!(code, 207, "fault {fault}: {body}");
        assert_only_the_middle_failed(&body, status, says);
        let started = Instant::now();
        let (code, body) = post_x(&server, &model, &[5.0]).await;
        assert_eq!(code, 200, "after fault {fault}: {body}");
        assert_eq!(output_f32(&body, "y"), vec![10.0]);
        eprintln!(
            "{model}: after fault {fault}, the next request took {:?}",
            started.elapsed()
        );
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{model}: recovery took {:?}",
            started.elapsed()
        );
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_python_failure_fails_only_its_item() {
    each_failure_fails_its_item_alone(
        "python",
        "RuntimeError: faulty-python: exception requested",
        "predict trapped",
        "MemoryError",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_javascript_failure_fails_only_its_item() {
    each_failure_fails_its_item_alone(
        "js",
        "Error: faulty-js: exception requested",
        "faulty-js: thrown past the SDK",
        "out of memory",
    )
    .await;
}

/// An exception with a 16 MiB message: the SDK cuts it before formatting (formatting the
/// whole of it ran the plugin out of memory, a trap), so it stays the item's clean 500.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_exception_with_a_16_mib_message_is_its_item_s_500() {
    let model = "faulty-python";
    let repository = repository_of(&common::root().join("tests/models").join(model));
    let server = TestServer::start(repository.path()).await;
    let (status, body) = post_x(&server, model, &[1.0, -12.0, 3.0]).await;
    assert_eq!(status, 207, "{body}");
    assert_only_the_middle_failed(&body, 500, "RuntimeError: faulty-python: xxx");
    let error = body["results"][1]["error"].as_str().unwrap();
    assert!(error.len() < 8192, "{}", error.len());
    server.stop().await;
}

/// The Python plugin held to the limits the Rust plugins are: deep recursion is its item's
/// 500; a 3 s sleep is cut at the model's 1 s deadline (504) while its neighbours are
/// answered; every wall of the sandbox holds (no file outside the model folder, no
/// environment, no socket, no subprocess); and the server's memory is back within bounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_plugin_is_held_to_every_limit() {
    let model = "faulty-python";
    let repository = repository_of(&common::root().join("tests/models").join(model));
    let server = TestServer::start(repository.path()).await;
    let (status, body) = post_x(&server, model, &[1.0, -4.0, 3.0]).await;
    assert_eq!(status, 207, "{body}");
    assert_only_the_middle_failed(&body, 500, "RecursionError");

    let started = Instant::now();
    let (status, body) = post_x(&server, model, &[1.0, -9.0, 3.0]).await;
    let took = started.elapsed();
    assert_eq!(status, 207, "{body}");
    assert_only_the_middle_failed(&body, 504, "exceeded its time limit");
    eprintln!("faulty-python: a 3 s sleep answered after {took:?} (deadline 1 s)");
    assert!(took < Duration::from_millis(2500), "{took:?}");

    let (status, body) = post_x(&server, model, &[1.0, -60.0, 3.0]).await;
    assert_eq!(status, 207, "{body}");
    assert_only_the_middle_failed(&body, 422, "faulty-python walls: ");
    let walls = body["results"][1]["error"].as_str().unwrap();
    eprintln!("faulty-python: {walls}");
    assert!(!walls.contains("BREACH"), "{walls}");
    for met in [
        "open /etc/passwd: ",
        "open /model/../../etc/passwd: ",
        "open /proc/self/environ: ",
        "environment: 0 variables",
        "socket: ",
        "subprocess: ",
    ] {
        assert!(walls.contains(met), "{met} in {walls}");
    }
    let (status, body) = post_x(&server, model, &[5.0]).await;
    assert_eq!((status, output_f32(&body, "y")), (200, vec![10.0]), "{body}");
    server.stop().await;
}

/// The JavaScript plugin likewise: deep recursion is its item's 500, a 3 s busy wait is
/// cut at the deadline (504) while its neighbours are answered, no wall gives, and `fetch`
/// (the host links no wasi:http) traps its item alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_javascript_plugin_is_held_to_every_limit() {
    let model = "faulty-js";
    let repository = repository_of(&common::root().join("tests/models").join(model));
    let server = TestServer::start(repository.path()).await;
    let (status, body) = post_x(&server, model, &[1.0, -4.0, 3.0]).await;
    assert_eq!(status, 207, "{body}");
    assert_only_the_middle_failed(&body, 500, "recursion");

    let started = Instant::now();
    let (status, body) = post_x(&server, model, &[1.0, -9.0, 3.0]).await;
    let took = started.elapsed();
    assert_eq!(status, 207, "{body}");
    assert_only_the_middle_failed(&body, 504, "exceeded its time limit");
    eprintln!("faulty-js: a 3 s busy wait answered after {took:?} (deadline 1 s)");
    // One deadline for the batch, one for the culprit's re-run alone, and a new
    // SpiderMonkey instance made after each cut (2.16 s idle, 2.41-2.63 s beside a
    // benchmark on two cores); a wait that was not cut would hold the batch's call alone
    // for 3 s.
    assert!(took < Duration::from_secs(3), "{took:?}");
    let (status, body) = post_x(&server, model, &[1.0, -60.0, 3.0]).await;
    assert_eq!(status, 207, "{body}");
    assert_only_the_middle_failed(&body, 422, "faulty-js walls: ");
    let walls = body["results"][1]["error"].as_str().unwrap();
    eprintln!("faulty-js: {walls}");
    assert!(!walls.contains("BREACH"), "{walls}");
    assert!(
        walls.contains("environment: none") && walls.contains("require: absent"),
        "{walls}"
    );
    let (status, body) = post_x(&server, model, &[1.0, -62.0, 3.0]).await;
    assert_eq!(status, 207, "{body}");
    assert_only_the_middle_failed(&body, 500, "trapped");
    let (status, body) = post_x(&server, model, &[5.0]).await;
    assert_eq!((status, output_f32(&body, "y")), (200, vec![10.0]), "{body}");
    server.stop().await;
}

/// Python's memory bomb at the model's own cap (64 MiB): `MemoryError` is the item's 500,
/// no trap; from a start of ~13 MiB the instance never grows the 64 MiB past it after
/// which a grown instance is replaced, but it ran into its cap, so it is replaced all the
/// same and the server's memory is back where it was. (Before, it served on holding its
/// whole cap: RSS +51 MiB for the instance's life.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_memory_bomb_at_64_mib_fails_alone_and_its_instance_is_replaced() {
    a_memory_bomb_is_bounded("faulty-python", 64, "MemoryError", Replaced::ForItsGrowth).await;
}

/// With room to grow past that (128 MiB), the grown instance is replaced after its call
/// and the server's memory is back where it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_memory_bomb_at_128_mib_fails_alone_and_its_instance_is_replaced() {
    a_memory_bomb_is_bounded("faulty-python", 128, "MemoryError", Replaced::ForItsGrowth).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_javascript_memory_bomb_fails_alone_and_its_instance_is_replaced() {
    a_memory_bomb_is_bounded("faulty-js", 128, "out of memory", Replaced::ForItsGrowth).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_python_output_fails_alone_within_an_rss_bound() {
    a_huge_output_fails_alone("faulty-python").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_javascript_output_fails_alone_within_an_rss_bound() {
    a_huge_output_fails_alone("faulty-js").await;
}
