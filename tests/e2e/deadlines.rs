//! Deadlines that hold whatever the plugin does, host calls included: a plugin parked in
//! a WASI sleep (fault -9 of tests/plugins/faulty) or sleeping in `init`.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::common;
use common::{request, TestServer};

use crate::common::FAULTY_INFER;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_sleeping_in_a_host_call_answers_504_at_its_deadline() {
    let server = TestServer::start_faulty(
        "max_batch_size = 8\nmax_queue_delay_us = 50000",
        "instances = 1\ntimeout_ms = 300",
    )
    .await;

    // Alone: one deadline, not the 3 s the plugin asked for.
    let (status, took) = server.spawn_faulty(&[-9.0]).await.unwrap();
    assert_eq!(status, 504);
    assert!(
        took < Duration::from_millis(300 + 400),
        "the sleeper answered after {took:?}"
    );

    // With neighbours in its batch: they pay one deadline plus their own short re-run,
    // the sleeper one more deadline (it is re-run alone), never its 3 s.
    let sleeper = server.spawn_faulty(&[-9.0]);
    let neighbours: Vec<_> = (1..=3).map(|x| server.spawn_faulty(&[x as f32])).collect();
    let (status, took) = sleeper.await.unwrap();
    assert_eq!(status, 504);
    assert!(
        took < Duration::from_millis(2 * 300 + 500),
        "the sleeper answered after {took:?}"
    );
    for neighbour in neighbours {
        let (status, took) = neighbour.await.unwrap();
        assert_eq!(status, 200);
        assert!(
            took < Duration::from_millis(300 + 500),
            "a neighbour answered after {took:?}"
        );
    }
    let (status, body) = server.post_faulty(&[4.0]).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        common::output_f32(&body, "y"),
        vec![8.0],
        "the replaced instance serves"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sleepers_do_not_starve_another_client() {
    let server = TestServer::start_faulty(
        "max_batch_size = 1\nmax_queue_delay_us = 0",
        "instances = 2\ntimeout_ms = 300",
    )
    .await;
    let sleepers: Vec<_> = (0..2).map(|_| server.spawn_faulty(&[-9.0])).collect();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (status, took) = server.spawn_faulty(&[1.0]).await.unwrap();
    assert_eq!(status, 200);
    // It waits for an instance at most one deadline.
    assert!(took < Duration::from_millis(300 + 400), "answered after {took:?}");
    for sleeper in sleepers {
        assert_eq!(sleeper.await.unwrap().0, 504);
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_init_sleeping_past_its_deadline_fails_the_load_at_the_deadline() {
    let config = format!(
        "{}\ninit_timeout_ms = 400\n\n[parameters]\nsleep_init_ms = \"20000\"\n",
        common::faulty_config("max_batch_size = 1", "instances = 1")
    );
    let repository = common::faulty_repository(&config);
    let started = Instant::now();
    let server = TestServer::start(repository.path()).await;
    let index = common::index(&server).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    let row = &index[0];
    assert_eq!(row["state"], "UNAVAILABLE", "{index}");
    assert!(
        row["reason"]
            .as_str()
            .unwrap()
            .contains("init did not finish within its time limit of 400 ms"),
        "{index}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_is_live_while_a_slow_model_loads_and_ready_after() {
    // init sleeps 1.5 s (within its 5 s limit): the model loads slowly but loads.
    let config = format!(
        "{}\ninit_timeout_ms = 5000\n\n[parameters]\nsleep_init_ms = \"1500\"\n",
        common::faulty_config("max_batch_size = 1", "instances = 1")
    );
    let repository = common::faulty_repository(&config);
    // Not `start`, which would wait for the model.
    let server = TestServer::spawn(common::serve_config(repository.path()), false).await;
    let started = Instant::now();
    let (client, url) = (&server.client, |path: &str| server.url(path));
    let live = loop {
        if let Ok(r) = client.get(url("/v2/health/live")).send().await {
            break r.status().as_u16();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(live, 200);
    assert!(
        started.elapsed() < Duration::from_millis(1000),
        "live after {:?}",
        started.elapsed()
    );
    let ready = client.get(url("/v2/health/ready")).send().await.unwrap().status();
    assert_eq!(ready, 503, "not ready while the model loads");
    let early = client
        .post(url(FAULTY_INFER))
        .json(&request("x", "FP32", &[1, 1], json!([1.0])))
        .send()
        .await
        .unwrap();
    assert_eq!(early.status(), 503, "a loading model answers 503, to be retried");
    assert_eq!(early.headers()["retry-after"], "1");
    let ready_at = loop {
        if client.get(url("/v2/health/ready")).send().await.unwrap().status() == 200 {
            break started.elapsed();
        }
        assert!(started.elapsed() < Duration::from_secs(20), "never became ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(ready_at >= Duration::from_millis(1500), "ready after {ready_at:?}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn items_of_a_request_that_timed_out_free_their_instance_promptly() {
    let server = TestServer::start_faulty(
        "max_batch_size = 16\nmax_queue_delay_us = 0",
        "instances = 1\ntimeout_ms = 1500",
    )
    .await;
    // Sixteen looping items, with a 300 ms budget for the whole request.
    let mut looping = request("x", "FP32", &[16, 1], json!(vec![-2.0; 16]));
    looping["parameters"] = json!({"timeout": 300_000});
    let started = Instant::now();
    let (status, body) = server.post_json(FAULTY_INFER, &looping).await;
    assert_eq!(status, 207, "{body}");
    assert!(
        started.elapsed() < Duration::from_millis(1000),
        "{:?}",
        started.elapsed()
    );
    // The batch runs into its 1.5 s call limit once; its items are not re-run one by one
    // (16 more limits) for a client that is no longer waiting.
    let started = Instant::now();
    let (status, body) = server.post_faulty(&[3.0]).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        started.elapsed() < Duration::from_millis(1500 + 1000),
        "the next client waited {:?}",
        started.elapsed()
    );
    let stats = common::stats(&server, "faulty").await;
    assert!(stats["items_abandoned"].as_u64().unwrap() >= 15, "{stats}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_clients_batch_level_error_leaves_another_clients_items_answered() {
    // Requests wait up to 300 ms for company, so the two clients share one batch.
    let server = TestServer::start_faulty("max_batch_size = 8\nmax_queue_delay_us = 300000", "instances = 1").await;
    let (bad, good) = (
        request("x", "FP32", &[1, 1], json!([-15.0])),
        request("x", "FP32", &[2, 1], json!([1.0, 2.0])),
    );
    let (bad, good) = (
        server.post_json(FAULTY_INFER, &bad),
        server.post_json(FAULTY_INFER, &good),
    );
    let ((bad_status, bad_body), (good_status, good_body)) = tokio::join!(bad, good);
    assert_eq!(bad_status, 400, "{bad_body}");
    assert!(
        bad_body["error"].as_str().unwrap().contains("batch rejected"),
        "{bad_body}"
    );
    assert_eq!(good_status, 200, "{good_body}");
    assert_eq!(common::output_f32(&good_body, "y"), vec![2.0, 4.0]);
    let stats = common::stats(&server, "faulty").await;
    // Both clients' three items went out as one batch: the isolation happened inside it.
    assert_eq!(
        (stats["batches"].as_u64(), stats["items"].as_u64()),
        (Some(1), Some(3)),
        "{stats}"
    );
    server.stop().await;
}
