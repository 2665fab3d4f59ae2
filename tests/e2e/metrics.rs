//! `/metrics` read back with a Prometheus parser after a known sequence of requests, the
//! plugins' own metrics and metadata (and the host's refusals of their misuse), and
//! readiness that tells the truth.

use std::time::Duration;

use serde_json::json;
use tensorplug::app::config::RepositoryApi;
use tensorplug::protocol::grpc::proto::grpc_inference_service_client::GrpcInferenceServiceClient;
use tensorplug::protocol::grpc::proto::infer_parameter::ParameterChoice;
use tensorplug::protocol::grpc::proto::{ModelMetadataRequest, ServerReadyRequest};
use tonic::transport::Channel;

use crate::common::metrics::scrape;
use crate::common::{self, request, TestServer};

use crate::common::FAULTY_INFER;

fn faulty(labels: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
    let mut all = vec![("model", "faulty"), ("version", "1")];
    all.extend_from_slice(labels);
    all
}

/// Sends a request of one item per value in the background; resolves to its status.
fn spawn_request(server: &TestServer, values: Vec<f32>) -> tokio::task::JoinHandle<u16> {
    let (client, url) = (server.client.clone(), server.url(FAULTY_INFER));
    tokio::spawn(async move {
        let n = values.len() as u64;
        let body = request("x", "FP32", &[n, 1], json!(values));
        client
            .post(url)
            .json(&body)
            .send()
            .await
            .expect("POST")
            .status()
            .as_u16()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_and_histograms_move_exactly_with_a_known_sequence() {
    // One instance, no waiting for fuller batches, room for three queued items: every
    // request below is one batch, and the fourth step can fill the queue.
    let server = TestServer::start_faulty(
        "max_batch_size = 4\nmax_queue_delay_us = 0\nmax_queue_size = 3",
        "instances = 1\ntimeout_ms = 400",
    )
    .await;

    // 1. a success; 2. a 207 (the middle item rejected by the plugin); 3. a trap.
    assert_eq!(server.post_faulty(&[1.0]).await.0, 200);
    let (status, body) = server.post_faulty(&[1.0, -5.0, 2.0]).await;
    assert_eq!(status, 207, "{body}");
    assert_eq!(server.post_faulty(&[-1.0]).await.0, 500);
    // 4. a loop holds the only instance until its 400 ms limit (504), three items wait
    // in the queue (200 once the instance is free), and the next finds it full (503).
    let looping = spawn_request(&server, vec![-2.0]);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let queued = spawn_request(&server, vec![3.0, 3.0, 3.0]);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(server.post_faulty(&[4.0]).await.0, 503);
    assert_eq!(looping.await.expect("looping request"), 504);
    assert_eq!(queued.await.expect("queued request"), 200);
    // 5. the plugin misuses its metrics: the host refuses, the item gets the reason.
    let (status, body) = server.post_faulty(&[-16.0]).await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body["error"]
            .as_str()
            .expect("error")
            .contains("not a valid metric name"),
        "{body}"
    );

    let m = scrape(&server).await;
    let requests = |status| {
        m.value(
            "tensorplug_requests_total",
            &faulty(&[("protocol", "rest"), ("status", status)]),
        )
    };
    for (status, count) in [
        ("200", 2.0),
        ("207", 1.0),
        ("500", 1.0),
        ("503", 1.0),
        ("504", 1.0),
        ("422", 1.0),
    ] {
        assert_eq!(requests(status), count, "requests answered {status}");
    }
    // Items that ran: 1 + 3 + 1 + 1 (loop) + 3 (queued) + 1 = 10, in 6 batches.
    let value = |name| m.value(name, &faulty(&[]));
    assert_eq!(value("tensorplug_items_total"), 10.0);
    assert_eq!(value("tensorplug_batches_total"), 6.0);
    assert_eq!(value("tensorplug_items_succeeded_total"), 6.0);
    assert_eq!(value("tensorplug_items_failed_total"), 4.0);
    assert_eq!(
        value("tensorplug_traps_total"),
        2.0,
        "the panic and the loop's time limit"
    );
    assert_eq!(value("tensorplug_instance_replacements_total"), 2.0);
    assert_eq!(value("tensorplug_timeouts_total"), 1.0);
    assert_eq!(value("tensorplug_queue_depth"), 0.0);
    assert_eq!(value("tensorplug_instances_live"), 1.0);
    assert_eq!(m.histogram_count("tensorplug_batch_size", &faulty(&[])), 6.0);
    assert_eq!(m.bucket("tensorplug_batch_size", &faulty(&[]), 1.0), 4.0);
    assert_eq!(m.bucket("tensorplug_batch_size", &faulty(&[]), 4.0), 6.0);
    assert_eq!(m.histogram_count("tensorplug_queue_wait_seconds", &faulty(&[])), 10.0);
    let stage = faulty(&[("stage", "predict")]);
    assert_eq!(m.histogram_count("tensorplug_stage_seconds", &stage), 6.0);
    // The looping call alone took its whole 400 ms limit.
    assert!(m.value("tensorplug_stage_seconds_sum", &stage) >= 0.4);
    let rest = faulty(&[("protocol", "rest")]);
    assert_eq!(m.histogram_count("tensorplug_request_duration_seconds", &rest), 7.0);
    let route = [("method", "POST"), ("route", "/v2/models/:model/infer")];
    let http = |status| {
        let mut labels = route.to_vec();
        labels.push(("status", status));
        m.value("tensorplug_http_requests_total", &labels)
    };
    assert_eq!((http("200"), http("503"), http("207")), (2.0, 1.0, 1.0));
    let loads = [("model", "faulty"), ("kind", "load"), ("outcome", "ready")];
    assert_eq!(m.value("tensorplug_model_loads_total", &loads), 1.0);
    assert_eq!(m.value("tensorplug_model_ready", &[("model", "faulty")]), 1.0);

    // The plugin's own: predict returned for 4 batches (not the trap's, not the loop's);
    // every item was observed before its fault, so 10 observations.
    assert_eq!(value("tensorplug_plugin_batches_total"), 4.0);
    assert_eq!(value("tensorplug_plugin_last_batch_size"), 1.0);
    assert_eq!(m.histogram_count("tensorplug_plugin_item_value", &faulty(&[])), 10.0);
    assert!(!m.text.contains("bad name"), "a refused name is never exported");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_misuse_is_refused_and_bounded() {
    let server = TestServer::start_faulty("max_batch_size = 8", "instances = 1").await;
    // A first batch makes `batches` a counter.
    assert_eq!(server.post_faulty(&[1.0]).await.0, 200);
    // Counter used as a gauge; metadata after init; names until the cap. The neighbour
    // (x = 1) succeeds.
    let (status, body) = server.post_faulty(&[-17.0, -18.0, -19.0, 1.0]).await;
    assert_eq!(status, 207, "{body}");
    let messages: Vec<String> = body["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| r["error"].as_str().unwrap_or("").to_owned())
        .collect();
    assert!(
        messages[0].contains("'batches' is a counter, not a gauge"),
        "{messages:?}"
    );
    assert!(messages[1].contains("can only be declared during init"), "{messages:?}");
    assert!(messages[2].contains("at most 32 metric names"), "{messages:?}");
    assert_eq!(messages[3], "");
    let m = scrape(&server).await;
    let names = m
        .scrape
        .samples
        .iter()
        .filter(|s| s.metric.starts_with("tensorplug_plugin_flood_"))
        .count();
    // batches, last_batch_size and item_value are three of the 32.
    assert_eq!(names, 29, "the names up to the cap, and no more");
    let (_, metadata) = server.get("/v2/models/faulty").await;
    assert!(metadata["parameters"].get("late").is_none(), "{metadata}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_metadata_is_in_rest_and_grpc_model_metadata() {
    let config = common::serve_config(common::examples());
    let server = TestServer::start_with_grpc(config).await;
    let (status, body) = server.get("/v2/models/digits").await;
    assert_eq!(status, 200);
    assert_eq!(body["parameters"]["labels"], "0,1,2,3,4,5,6,7,8,9", "{body}");
    assert!(body["parameters"]["description"]
        .as_str()
        .expect("description")
        .contains("scikit-learn"));

    let mut client = server.grpc_client().await;
    let metadata = client
        .model_metadata(ModelMetadataRequest {
            name: "digits".into(),
            version: String::new(),
        })
        .await
        .expect("ModelMetadata")
        .into_inner();
    let labels = metadata
        .parameters
        .get("labels")
        .and_then(|p| p.parameter_choice.clone());
    assert_eq!(labels, Some(ParameterChoice::StringParam("0,1,2,3,4,5,6,7,8,9".into())));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_starts_plugin_metrics_afresh_and_an_unload_removes_them() {
    let repository = common::faulty_repository(&common::faulty_config("max_batch_size = 1", "instances = 1"));
    let mut config = common::serve_config(repository.path());
    config.repository_api = RepositoryApi::Open;
    let server = TestServer::start_with(config).await;
    assert_eq!(server.post_faulty(&[1.0]).await.0, 200);
    assert_eq!(
        scrape(&server)
            .await
            .value("tensorplug_plugin_batches_total", &faulty(&[])),
        1.0
    );

    let (status, _) = server
        .post_json("/v2/repository/models/faulty/unload", &json!({}))
        .await;
    assert_eq!(status, 200);
    let m = scrape(&server).await;
    assert!(
        !m.has("tensorplug_plugin_batches_total", &[("model", "faulty")]),
        "{}",
        m.text
    );
    assert!(!m.has("tensorplug_items_total", &[("model", "faulty")]));
    assert_eq!(m.value("tensorplug_model_ready", &[("model", "faulty")]), 0.0);

    let (status, _) = server.post_json("/v2/repository/models/faulty/load", &json!({})).await;
    assert_eq!(status, 200);
    let m = scrape(&server).await;
    assert_eq!(m.value_or_zero("tensorplug_plugin_batches_total", &faulty(&[])), 0.0);
    assert_eq!(m.value("tensorplug_items_total", &faulty(&[])), 0.0);
    let reloads = [("model", "faulty"), ("kind", "load"), ("outcome", "ready")];
    assert_eq!(m.value("tensorplug_model_loads_total", &reloads), 2.0);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_off_serves_no_metrics_and_inference_still_counts() {
    let repository = common::faulty_repository(&common::faulty_config("max_batch_size = 1", "instances = 1"));
    let mut config = common::serve_config(repository.path());
    config.metrics = tensorplug::app::config::Metrics::Off;
    let server = TestServer::start_with(config).await;
    assert_eq!(server.post_faulty(&[1.0]).await.0, 200);
    let (status, body) = server.get("/metrics").await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(common::stats(&server, "faulty").await["items"], 1);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_is_ready_only_when_every_model_it_should_serve_is() {
    // Two models: one good, one whose init fails.
    let repository = common::faulty_repository(&common::faulty_config("max_batch_size = 1", "instances = 1"));
    let broken = repository.path().join("broken");
    std::fs::create_dir(&broken).expect("folder");
    std::fs::copy(
        repository.path().join("faulty/predict.wasm"),
        broken.join("predict.wasm"),
    )
    .expect("copy");
    let broken_toml = format!(
        "{}\n[parameters]\nfail_init = \"true\"\n",
        common::faulty_config("max_batch_size = 1", "instances = 1")
    );
    std::fs::write(broken.join("model.toml"), &broken_toml).expect("model.toml");
    let server = TestServer::start_with_grpc(common::serve_config(repository.path())).await;
    let client = server.grpc_client().await;
    let grpc_ready = |mut client: GrpcInferenceServiceClient<Channel>| async move {
        client
            .server_ready(ServerReadyRequest {})
            .await
            .expect("ServerReady")
            .into_inner()
            .ready
    };

    let (status, body) = server.get("/v2/health/ready").await;
    assert_eq!((status, body), (503, json!({"ready": false})));
    assert!(!grpc_ready(client.clone()).await);
    assert_eq!(server.get("/v2/models/faulty/ready").await.0, 200);

    // Fixed on disk: reloaded, and the server turns ready on both protocols.
    std::fs::write(
        broken.join("model.toml"),
        common::faulty_config("max_batch_size = 1", "instances = 1"),
    )
    .expect("model.toml");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while server.get("/v2/health/ready").await.0 != 200 {
        assert!(tokio::time::Instant::now() < deadline, "never turned ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(grpc_ready(client).await);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_that_is_loading_is_not_ready_in_the_protocols_words() {
    let repository = common::faulty_repository(&common::faulty_config("max_batch_size = 1", "instances = 1"));
    let server = TestServer::start(repository.path()).await;
    // A second model whose init takes 1.5 s, added while the server runs (poll mode).
    let slow = repository.path().join("slow");
    std::fs::create_dir(&slow).expect("folder");
    std::fs::copy(repository.path().join("faulty/predict.wasm"), slow.join("predict.wasm")).expect("copy");
    let toml = format!(
        "{}\n[parameters]\nsleep_init_ms = \"1500\"\n",
        common::faulty_config("max_batch_size = 1", "instances = 1\ninit_timeout_ms = 10000")
    );
    std::fs::write(slow.join("model.toml"), toml).expect("model.toml");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (status, body) = server.get("/v2/models/slow/ready").await;
        if status == 503 {
            assert_eq!(body, json!({"name": "slow", "ready": false}));
            assert_eq!(
                server.get("/v2/health/ready").await.0,
                503,
                "the server waits for it too"
            );
            break;
        }
        assert_eq!(status, 404, "unknown until the watcher sees the folder: {body}");
        assert!(tokio::time::Instant::now() < deadline, "never seen loading");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    while server.get("/v2/models/slow/ready").await.0 != 200 {
        assert!(tokio::time::Instant::now() < deadline, "never ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_served_edge_has_its_request_series_before_any_request() {
    let repository = common::faulty_repository(&common::faulty_config("max_batch_size = 4", "instances = 1"));
    let both = TestServer::start_with_grpc(common::serve_config(repository.path())).await;
    let m = scrape(&both).await;
    for protocol in ["rest", "grpc"] {
        let labels = faulty(&[("protocol", protocol)]);
        assert_eq!(
            m.histogram_count("tensorplug_request_duration_seconds", &labels),
            0.0,
            "{protocol}"
        );
    }
    drop(both);

    // No gRPC port, no gRPC series.
    let rest_only = TestServer::start(repository.path()).await;
    let m = scrape(&rest_only).await;
    let rest = faulty(&[("protocol", "rest")]);
    assert_eq!(m.histogram_count("tensorplug_request_duration_seconds", &rest), 0.0);
    assert!(!m.has(
        "tensorplug_request_duration_seconds_count",
        &faulty(&[("protocol", "grpc")])
    ));
}
