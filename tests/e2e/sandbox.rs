//! Whole-instance limits and bounded sizes, against plugins written to break them
//! (faults -10, -11 and -12 of examples/faulty).

use serde_json::json;

use crate::common;
use common::{request, TestServer};

const INFER: &str = "/v2/models/faulty/infer";

/// Descriptors this process has open.
fn open_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |dir| dir.count())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_hoarding_handles_traps_at_the_cap_and_the_server_keeps_its_descriptors() {
    let repository = common::faulty_repository(&format!(
        "{}\nmax_handles = 64\n",
        common::faulty_config("max_batch_size = 1", "instances = 1")
    ));
    let server = TestServer::start(repository.path()).await;
    let before = open_descriptors();
    let (status, body) = server
        .post_json(INFER, &request("x", "FP32", &[1, 1], json!([-10.0])))
        .await;
    assert_eq!(status, 500, "{body}");
    let message = body["error"].as_str().unwrap();
    assert!(message.contains("limits.max_handles"), "{message}");
    assert!(message.contains("open"), "the backtrace shows where: {message}");
    // The trapped instance (and its files) is gone; the server still opens what it needs.
    let after = open_descriptors();
    assert!(after <= before + 8, "descriptors: {before} before, {after} after");
    let (status, body) = server
        .post_json(INFER, &request("x", "FP32", &[1, 1], json!([2.0])))
        .await;
    assert_eq!(status, 200, "{body}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ten_mib_error_message_is_cut_in_the_answer() {
    let repository = common::faulty_repository(&common::faulty_config("max_batch_size = 1", "instances = 1"));
    let server = TestServer::start(repository.path()).await;
    let response = server
        .client
        .post(server.url(INFER))
        .json(&request("x", "FP32", &[1, 1], json!([-12.0])))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 422);
    let text = response.text().await.unwrap();
    assert!(text.len() < 8 * 1024, "a {} byte answer", text.len());
    assert!(text.contains("more bytes cut"), "{}", &text[..200]);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_flood_is_cut_to_the_per_call_budget() {
    let repository = common::faulty_repository(&common::faulty_config("max_batch_size = 1", "instances = 1"));
    let server = common::process::ServerProcess::spawn(repository.path(), &[]).await;
    let response = server
        .client
        .post(server.url(INFER))
        .json(&request("x", "FP32", &[1, 1], json!([-11.0])))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let log = server.log();
    let flood = log.iter().filter(|l| l.contains("faulty: flood line")).count();
    assert!(flood <= 200, "{flood} flood lines reached the log");
    assert!(
        log.iter()
            .any(|l| l.contains("plugin log lines dropped") && l.contains("dropped=999800")),
        "no single record of the dropped lines"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_and_flooded_outputs_are_contract_violations_of_their_items_only() {
    let repository = common::faulty_repository(&common::faulty_config("max_batch_size = 8", "instances = 1"));
    let server = TestServer::start(repository.path()).await;
    for fault in [-13.0, -14.0] {
        let started = std::time::Instant::now();
        // One request of three items: the culprit fails alone, its neighbours get one `y` each.
        let (status, body) = server
            .post_json(INFER, &request("x", "FP32", &[3, 1], json!([1.0, fault, 3.0])))
            .await;
        assert_eq!(status, 207, "{body}");
        let results = body["results"].as_array().unwrap();
        assert_eq!(results[1]["status"], 500, "{body}");
        let message = results[1]["error"].as_str().unwrap();
        assert!(
            message.contains("appears more than once") || message.contains("more than 256 tensors per item"),
            "{message}"
        );
        for (i, expected) in [(0, 2.0), (2, 6.0)] {
            let outputs = results[i]["outputs"].as_array().unwrap();
            assert_eq!(outputs.len(), 1, "{body}");
            assert_eq!(outputs[0]["data"], json!([expected]));
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "took {:?}",
            started.elapsed()
        );
    }
    server.stop().await;
}
