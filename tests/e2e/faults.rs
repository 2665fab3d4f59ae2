//! End to end: plugins that panic, loop, or break the contract fail only their own items.

use crate::common;

use common::{output_f32, request, TestServer};
use serde_json::json;

use crate::common::FAULTY_INFER;

fn repository() -> std::path::PathBuf {
    common::root().join("tests/models")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_item_gets_500_and_the_next_request_succeeds() {
    let server = TestServer::start(&repository()).await;
    let (status, body) = server.post_faulty(&[-1.0]).await;
    assert_eq!(status, 500, "{body}");
    let error = body["error"].as_str().unwrap();
    assert!(error.contains("faulty: panic requested"), "{error}");
    assert!(error.contains("predict"), "{error}");

    let (status, body) = server.post_faulty(&[21.0]).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(output_f32(&body, "y"), vec![42.0]);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_items_each_get_their_own_status() {
    let server = TestServer::start(&repository()).await;
    let (status, body) = server.post_faulty(&[1.0, -1.0, 2.0, -5.0, 3.0]).await;
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
    assert!(results[1]["error"].as_str().unwrap().contains("panic requested"));
    assert!(results[3]["error"].as_str().unwrap().contains("item rejected"));
    server.stop().await;
}

/// Sends 32 single-item requests at once, one of them `fault`; returns (status, body)
/// per request, in order.
async fn concurrent_with_one_fault(server: &TestServer, fault: f32) -> Vec<(u16, serde_json::Value)> {
    let mut tasks = Vec::new();
    for i in 0..32 {
        let x = if i == 13 { fault } else { i as f32 };
        let client = server.client.clone();
        let url = server.url(FAULTY_INFER);
        tasks.push(tokio::spawn(async move {
            let r = client
                .post(url)
                .json(&request("x", "FP32", &[1, 1], json!([x])))
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            (status, r.json::<serde_json::Value>().await.unwrap())
        }));
    }
    common::join_all(tasks).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_fault_among_32_concurrent_requests_fails_only_itself() {
    let server = TestServer::start(&repository()).await;
    for (fault, status, needle) in [
        (-1.0, 500, "faulty: panic requested"),
        (-2.0, 504, "exceeded its time limit of 500 ms"),
        (-3.0, 500, "memory allocation"),
        (-4.0, 500, "stack"),
    ] {
        let answers = concurrent_with_one_fault(&server, fault).await;
        for (i, (got, body)) in answers.iter().enumerate() {
            if i == 13 {
                assert_eq!(*got, status, "fault {fault}: {body}");
                let error = body["error"].as_str().unwrap();
                assert!(error.contains(needle), "fault {fault}: {error}");
            } else {
                assert_eq!(*got, 200, "fault {fault}, request {i}: {body}");
                assert_eq!(
                    output_f32(body, "y"),
                    vec![2.0 * i as f32],
                    "fault {fault}, request {i}"
                );
            }
        }
        let stats = common::stats(&server, "faulty").await;
        assert_eq!(stats["instances_live"], stats["instances"], "fault {fault}: {stats}");
        let (status, body) = server.post_faulty(&[4.0]).await;
        assert_eq!(
            (status, output_f32(&body, "y")),
            (200, vec![8.0]),
            "after fault {fault}"
        );
    }
    let stats = common::stats(&server, "faulty").await;
    assert!(stats["traps"].as_u64().unwrap() >= 4, "{stats}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contract_violations_are_caught_and_isolated() {
    let server = TestServer::start(&repository()).await;
    for (fault, needle) in [
        (-6.0, "output 'y' has shape [4, 1], expected leading dimension 3"),
        (-7.0, "output 'y' is missing"),
        (-8.0, "out of range"),
    ] {
        let (status, body) = server.post_faulty(&[1.0, fault, 3.0]).await;
        assert_eq!(status, 207, "fault {fault}: {body}");
        let results = body["results"].as_array().unwrap();
        assert_eq!(results[0]["status"], 200, "{body}");
        assert_eq!(results[2]["status"], 200, "{body}");
        assert_eq!(output_f32(&results[2], "y"), vec![6.0]);
        assert_eq!(results[1]["status"], 500, "{body}");
        let error = results[1]["error"].as_str().unwrap();
        assert!(
            error.contains("contract") || error.contains("declared outputs"),
            "{error}"
        );
        if fault != -6.0 {
            assert!(error.contains(needle), "{error}");
        }
    }
    // A lone wrong-shape item: the batch is [2, 1] for one item.
    let (status, body) = server.post_faulty(&[-6.0]).await;
    assert_eq!(status, 500, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("expected leading dimension 1"),
        "{body}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_answers_503_with_retry_after() {
    let server = TestServer::start_faulty(
        "max_batch_size = 1\nmax_queue_delay_us = 0\nmax_queue_size = 2",
        "instances = 1\ntimeout_ms = 1500",
    )
    .await;
    // One looping item occupies the only instance for 1.5 s; two more fill the queue.
    let mut busy = Vec::new();
    for x in [-2.0, 1.0, 2.0] {
        busy.push(server.spawn_faulty(&[x]));
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let r = server
        .client
        .post(server.url(FAULTY_INFER))
        .json(&request("x", "FP32", &[1, 1], json!([3.0])))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"], "1");
    let body: serde_json::Value = r.json().await.unwrap();
    assert!(body["error"].as_str().unwrap().contains("queue"), "{body}");
    let statuses: Vec<u16> = common::join_all(busy)
        .await
        .into_iter()
        .map(|(status, _)| status)
        .collect();
    assert_eq!(statuses, vec![504, 200, 200]);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_timeout_answers_504_and_departed_clients_cost_no_plugin_call() {
    let server = TestServer::start_faulty(
        "max_batch_size = 1\nmax_queue_delay_us = 0",
        "instances = 1\ntimeout_ms = 1000",
    )
    .await;
    let looping = server.spawn_faulty(&[-2.0]);
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;

    // Queued behind the loop with a 100 ms budget (microseconds, as Triton's `timeout`).
    let mut timed = request("x", "FP32", &[1, 1], json!([5.0]));
    timed["parameters"] = json!({"timeout": 100_000});
    let (status, body) = server.post_json(FAULTY_INFER, &timed).await;
    assert_eq!(status, 504, "{body}");
    assert!(body["error"].as_str().unwrap().contains("timed out"), "{body}");

    // A client that hangs up while queued.
    let impatient = reqwest::Client::builder()
        .timeout(std::time::Duration::from_millis(100))
        .build()
        .unwrap();
    let gone = impatient
        .post(server.url(FAULTY_INFER))
        .json(&request("x", "FP32", &[1, 1], json!([6.0])))
        .send()
        .await;
    assert!(gone.is_err(), "the client should have given up");

    assert_eq!(looping.await.unwrap().0, 504);
    let (status, _) = server.post_faulty(&[7.0]).await;
    assert_eq!(status, 200);
    let stats = common::stats(&server, "faulty").await;
    // The loop, and the last request: the two departed items never reached the plugin.
    assert_eq!(stats["items_abandoned"], 2, "{stats}");
    assert_eq!(stats["items"], 2, "{stats}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_stays_bounded_over_1000_faulting_requests() {
    // The server as a child process, so that its memory is measured alone.
    let server = common::process::ServerProcess::spawn(&repository(), &[]).await;
    let send = |x: f32| {
        let client = server.client.clone();
        let url = server.url(FAULTY_INFER);
        async move {
            client
                .post(url)
                .json(&request("x", "FP32", &[1, 1], json!([x])))
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    for i in 0..100 {
        send(if i % 2 == 0 { -1.0 } else { -3.0 }).await;
    }
    let before = server.rss_kib();
    for i in 0..1000 {
        let status = send(if i % 2 == 0 { -1.0 } else { -3.0 }).await;
        assert_eq!(status, 500);
    }
    let growth = server.rss_kib().saturating_sub(before);
    assert!(growth < 64 << 10, "RSS grew by {} MiB over 1000 traps", growth >> 10);
    assert_eq!(send(1.0).await, 200);
    let stats = server.stats("faulty").await;
    assert_eq!(stats["instances_live"], stats["instances"], "{stats}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item_wise_stages_are_isolated_too() {
    let server = TestServer::start(&repository()).await;
    let path = "/v2/models/faulty-pipeline/infer";
    for (fault, status, needle) in [
        (-1.0, 500, "faulty-pre: panic requested"),
        (
            -9.0,
            500,
            "preprocess broke the plugin contract: returned 0 results for 1 items",
        ),
        (-10.0, 400, "faulty-pre: item refused"),
    ] {
        let (code, body) = server
            .post_json(path, &request("x", "FP32", &[4, 1], json!([1.0, fault, 3.0, 4.0])))
            .await;
        assert_eq!(code, 207, "fault {fault}: {body}");
        let results = body["results"].as_array().unwrap();
        for (i, want) in [(0, 2.0), (2, 6.0), (3, 8.0)] {
            assert_eq!(results[i]["status"], 200, "fault {fault}: {body}");
            assert_eq!(output_f32(&results[i], "y"), vec![want]);
        }
        assert_eq!(results[1]["status"], status, "fault {fault}: {body}");
        let error = results[1]["error"].as_str().unwrap();
        assert!(error.contains(needle), "fault {fault}: {error}");
    }
    server.stop().await;
}
