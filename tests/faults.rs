//! End to end: plugins that panic, loop, or break the contract fail only their own items.

mod common;

use common::{output_f32, request, TestServer};
use serde_json::json;

const INFER: &str = "/v2/models/faulty/infer";

fn repository() -> std::path::PathBuf {
    common::root().join("tests/models")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_item_gets_500_and_the_next_request_succeeds() {
    let server = TestServer::start(&repository()).await;
    let (status, body) = server
        .post_json(INFER, &request("x", "FP32", &[1, 1], json!([-1.0])))
        .await;
    assert_eq!(status, 500, "{body}");
    let error = body["error"].as_str().unwrap();
    assert!(error.contains("faulty: panic requested"), "{error}");
    assert!(error.contains("predict"), "{error}");

    let (status, body) = server
        .post_json(INFER, &request("x", "FP32", &[1, 1], json!([21.0])))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(output_f32(&body, "y"), vec![42.0]);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_items_each_get_their_own_status() {
    let server = TestServer::start(&repository()).await;
    let (status, body) = server
        .post_json(
            INFER,
            &request("x", "FP32", &[5, 1], json!([1.0, -1.0, 2.0, -5.0, 3.0])),
        )
        .await;
    assert_eq!(status, 207, "{body}");
    let statuses: Vec<u64> = body["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_u64().unwrap())
        .collect();
    assert_eq!(statuses, vec![200, 500, 200, 422, 200]);
    let results = body["results"].as_array().unwrap();
    assert_eq!(output_f32(&results[2], "y"), vec![4.0]);
    assert!(results[1]["error"]
        .as_str()
        .unwrap()
        .contains("panic requested"));
    assert!(results[3]["error"]
        .as_str()
        .unwrap()
        .contains("item rejected"));
    server.stop().await;
}
