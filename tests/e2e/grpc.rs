//! End to end over gRPC: the digits example through `inference.GRPCInferenceService`
//! (typed contents and raw contents, against scikit-learn's answers and the REST
//! edge's), partial failures, the status codes, the repository's access rules, and the
//! standard health and reflection services.

use std::collections::HashMap;
use std::time::Duration;

use crate::common;
use serde_json::{json, Value};
use tensorplug::app::config::ServeConfig;
use tensorplug::protocol::grpc::proto::grpc_inference_service_client::GrpcInferenceServiceClient;
use tensorplug::protocol::grpc::proto::infer_parameter::ParameterChoice;
use tensorplug::protocol::grpc::proto::model_infer_request::{InferInputTensor, InferRequestedOutputTensor};
use tensorplug::protocol::grpc::proto::{
    InferParameter, InferTensorContents, ModelInferRequest, ModelInferResponse, ModelMetadataRequest,
    ModelReadyRequest, ModelStatisticsRequest, RepositoryIndexRequest, RepositoryModelLoadRequest,
    RepositoryModelUnloadRequest, ServerLiveRequest, ServerMetadataRequest, ServerReadyRequest,
};
use tonic::transport::Channel;
use tonic::{Code, Request};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use crate::common::grpc;
use crate::common::process::ServerProcess;
use crate::common::{output, output_f32, request, TestServer};
use crate::digits::{assert_matches, cases, repository};

async fn start(config: ServeConfig) -> (TestServer, GrpcInferenceServiceClient<Channel>) {
    let server = TestServer::start_with_grpc(config).await;
    let client = server.grpc_client().await;
    (server, client)
}

async fn channel(server: &TestServer) -> Channel {
    grpc::channel(server.grpc_address()).await
}

/// A digits request of `rows` images, as typed `fp32_contents` or as raw bytes.
fn digits_request(pixels: &[f32], rows: i64, raw: bool) -> ModelInferRequest {
    model_request("digits", pixels, rows, raw)
}

/// [`digits_request`] for any model with digits' input.
fn model_request(model: &str, pixels: &[f32], rows: i64, raw: bool) -> ModelInferRequest {
    let (contents, raw_input_contents) = if raw {
        (None, vec![pixels.iter().flat_map(|p| p.to_le_bytes()).collect()])
    } else {
        (
            Some(InferTensorContents {
                fp32_contents: pixels.to_vec(),
                ..Default::default()
            }),
            Vec::new(),
        )
    };
    ModelInferRequest {
        model_name: model.into(),
        id: "req-1".into(),
        inputs: vec![InferInputTensor {
            name: "input-0".into(),
            datatype: "FP32".into(),
            shape: vec![rows, 64],
            parameters: HashMap::new(),
            contents,
        }],
        raw_input_contents,
        ..Default::default()
    }
}

/// The probabilities and labels of a digits answer (always in raw contents).
fn digits_answer(response: &ModelInferResponse) -> (Vec<f32>, Vec<i64>) {
    assert_eq!(response.model_name, "digits");
    model_answer(response)
}

/// [`digits_answer`] for any model with digits' outputs.
fn model_answer(response: &ModelInferResponse) -> (Vec<f32>, Vec<i64>) {
    assert_eq!(response.model_version, "1");
    assert_eq!(response.outputs.len(), 2);
    assert_eq!(response.raw_output_contents.len(), 2);
    let mut proba = Vec::new();
    let mut labels = Vec::new();
    for (tensor, bytes) in response.outputs.iter().zip(&response.raw_output_contents) {
        match tensor.name.as_str() {
            "probabilities" => {
                assert_eq!(tensor.datatype, "FP32");
                proba = bytes
                    .chunks(4)
                    .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                    .collect();
            }
            "label" => {
                assert_eq!(tensor.datatype, "INT64");
                labels = bytes
                    .chunks(8)
                    .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
                    .collect();
            }
            other => panic!("unexpected output {other}"),
        }
    }
    (proba, labels)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn digits_onnx_answers_the_oracle_over_grpc_typed_and_raw_single_and_batched() {
    // The ONNX graph through wasi:nn (examples/models/digits-onnx), as its REST tests do.
    let (server, mut client) = start(common::serve_config(repository())).await;
    let all = cases();
    for (i, case) in all.iter().enumerate() {
        let raw = i % 2 == 0;
        let response = client
            .model_infer(model_request("digits-onnx", &case.pixels, 1, raw))
            .await
            .unwrap_or_else(|s| panic!("case {i}: {s:?}"))
            .into_inner();
        assert_eq!(response.model_name, "digits-onnx");
        let (proba, labels) = model_answer(&response);
        assert_matches(case, labels[0], &proba, &format!("gRPC digits-onnx case {i}"));
    }
    for (k, chunk) in all.chunks(32).enumerate() {
        let pixels: Vec<f32> = chunk.iter().flat_map(|c| c.pixels.clone()).collect();
        let rows = chunk.len() as i64;
        let response = client
            .model_infer(model_request("digits-onnx", &pixels, rows, k % 2 == 0))
            .await
            .unwrap_or_else(|s| panic!("batch {k}: {s:?}"))
            .into_inner();
        let (proba, labels) = model_answer(&response);
        for (i, case) in chunk.iter().enumerate() {
            assert_matches(
                case,
                labels[i],
                &proba[i * 10..(i + 1) * 10],
                &format!("batch {k} item {i}"),
            );
        }
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_450_digits_requests_match_the_oracle_typed_and_raw() {
    let (server, mut client) = start(common::serve_config(repository())).await;
    for (i, case) in cases().iter().enumerate() {
        for raw in [false, true] {
            let response = client
                .model_infer(digits_request(&case.pixels, 1, raw))
                .await
                .unwrap_or_else(|s| panic!("case {i} (raw: {raw}): {s:?}"))
                .into_inner();
            assert_eq!(response.id, "req-1");
            assert_eq!(response.outputs[0].name, "probabilities");
            assert_eq!(response.outputs[0].shape, [1, 10]);
            assert_eq!(response.outputs[1].shape, [1, 1]);
            let (proba, labels) = digits_answer(&response);
            assert_matches(case, labels[0], &proba, &format!("gRPC case {i} (raw: {raw})"));
            // The same answer as REST, to the bit.
            if i < 20 {
                let (status, body) = server
                    .post_json(
                        crate::common::DIGITS_INFER,
                        &request("input-0", "FP32", &[1, 64], json!(case.pixels)),
                    )
                    .await;
                assert_eq!(status, 200, "{body}");
                assert_eq!(proba, output_f32(&body, "probabilities"), "case {i}");
                assert_eq!(labels[0], output(&body, "label")["data"][0].as_i64().unwrap());
            }
        }
    }
    // Several images in one request, and only the output asked for.
    let all = cases();
    let pixels: Vec<f32> = all[..8].iter().flat_map(|c| c.pixels.clone()).collect();
    let mut message = digits_request(&pixels, 8, true);
    message.outputs = vec![InferRequestedOutputTensor {
        name: "label".into(),
        parameters: HashMap::new(),
    }];
    let response = client.model_infer(message).await.expect("8 images").into_inner();
    assert_eq!(response.outputs.len(), 1);
    assert_eq!(response.outputs[0].shape, [8, 1]);
    let labels: Vec<i64> = response.raw_output_contents[0]
        .chunks(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(labels, all[..8].iter().map(|c| c.predict).collect::<Vec<_>>());
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_item_fails_the_call_and_the_trailer_has_every_items_status() {
    let (server, mut client) = start(common::serve_config(repository())).await;
    let all = cases();
    let mut pixels: Vec<f32> = all[..4].iter().flat_map(|c| c.pixels.clone()).collect();
    pixels[2 * 64 + 5] = 99.0;
    let status = client
        .model_infer(digits_request(&pixels, 4, false))
        .await
        .expect_err("one bad item");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(
        status.message().starts_with("1 of 4 items failed; each item's status is in the tensorplug-item-status trailer; item 2 (400): input-0[5]: pixel value 99"),
        "{}",
        status.message()
    );
    let trailer = status.metadata().get("tensorplug-item-status").expect("item trailer");
    let items: Value = serde_json::from_str(trailer.to_str().unwrap()).unwrap();
    assert_eq!(items[0], json!({"status": 200}));
    assert_eq!(items[1], json!({"status": 200}));
    assert_eq!(items[2]["status"], 400);
    assert!(
        items[2]["error"].as_str().unwrap().contains("pixel value 99"),
        "{items}"
    );
    assert_eq!(items[3], json!({"status": 200}));
    assert_eq!(items.as_array().unwrap().len(), 4);

    // The bad image alone: its own status, and its exact HTTP-style status in the trailer
    // (INVALID_ARGUMENT stands for 400 and 422 alike).
    let status = client
        .model_infer(digits_request(&pixels[2 * 64..3 * 64], 1, true))
        .await
        .expect_err("bad image");
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("pixel value 99"), "{}", status.message());
    let trailer = status.metadata().get("tensorplug-item-status").expect("a trailer");
    let items: Value = serde_json::from_str(trailer.to_str().unwrap()).unwrap();
    assert_eq!(items.as_array().map(Vec::len), Some(1));
    assert_eq!(items[0]["status"], 400);

    // Requests the protocol refuses, as REST refuses them (400 there).
    let mut short = digits_request(&pixels[..10], 1, false);
    let refused = client.model_infer(short.clone()).await.expect_err("too few values");
    assert_eq!(refused.code(), Code::InvalidArgument);
    assert!(
        refused.message().contains("needs 64 FP32 values, got 10"),
        "{}",
        refused.message()
    );
    short.inputs[0].datatype = "FP99".into();
    let refused = client.model_infer(short.clone()).await.expect_err("bad datatype");
    assert_eq!(refused.code(), Code::InvalidArgument);
    let mut both = digits_request(&pixels[..64], 1, true);
    both.raw_input_contents.push(Vec::new());
    let refused = client.model_infer(both).await.expect_err("two raw entries");
    assert!(
        refused.message().contains("raw_input_contents has 2 entries"),
        "{}",
        refused.message()
    );
    // The request `timeout` parameter is read as REST reads it.
    let mut timed = digits_request(&pixels[..64], 1, false);
    timed.parameters.insert(
        "timeout".into(),
        InferParameter {
            parameter_choice: Some(ParameterChoice::StringParam("soon".into())),
        },
    );
    let refused = client.model_infer(timed).await.expect_err("bad timeout");
    assert_eq!(refused.code(), Code::InvalidArgument);
    assert!(refused.message().contains("timeout"), "{}", refused.message());
    // The server keeps serving.
    assert!(client
        .model_infer(digits_request(&all[0].pixels, 1, false))
        .await
        .is_ok());
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_metadata_statistics_and_the_repository_rules() {
    let (server, mut client) = start(common::serve_config(repository())).await;
    assert!(
        client
            .server_live(ServerLiveRequest {})
            .await
            .unwrap()
            .into_inner()
            .live
    );
    assert!(
        client
            .server_ready(ServerReadyRequest {})
            .await
            .unwrap()
            .into_inner()
            .ready
    );
    let ready = |name: &str, version: &str| ModelReadyRequest {
        name: name.into(),
        version: version.into(),
    };
    assert!(
        client
            .model_ready(ready("digits", ""))
            .await
            .unwrap()
            .into_inner()
            .ready
    );
    assert!(
        client
            .model_ready(ready("digits", "1"))
            .await
            .unwrap()
            .into_inner()
            .ready
    );
    assert_eq!(
        client.model_ready(ready("nope", "")).await.unwrap_err().code(),
        Code::NotFound
    );
    assert_eq!(
        client.model_ready(ready("digits", "7")).await.unwrap_err().code(),
        Code::NotFound
    );

    let meta = client
        .server_metadata(ServerMetadataRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(meta.name, "tensorplug");
    assert!(meta.extensions.contains(&"model_repository".to_string()));
    let model = client
        .model_metadata(ModelMetadataRequest {
            name: "digits".into(),
            version: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(model.name, "digits");
    assert_eq!(model.versions, ["1"]);
    assert_eq!(model.platform, "tensorplug_wasm");
    assert_eq!(model.inputs[0].name, "input-0");
    assert_eq!(model.inputs[0].datatype, "FP32");
    assert_eq!(model.inputs[0].shape, [-1, 64]);
    assert_eq!(model.outputs[1].name, "label");
    assert_eq!(model.outputs[1].shape, [-1, 1]);
    let unknown = client
        .model_metadata(ModelMetadataRequest {
            name: "nope".into(),
            version: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound);
    assert!(unknown.message().contains("nope"), "{}", unknown.message());
    let mut message = digits_request(&cases()[0].pixels, 1, false);
    message.model_name = "nope".into();
    assert_eq!(client.model_infer(message).await.unwrap_err().code(), Code::NotFound);
    let mut message = digits_request(&cases()[0].pixels, 1, false);
    message.model_version = "2".into();
    assert_eq!(client.model_infer(message).await.unwrap_err().code(), Code::NotFound);

    // Statistics count the items run over either edge.
    client
        .model_infer(digits_request(&cases()[0].pixels, 1, false))
        .await
        .unwrap();
    let stats = client
        .model_statistics(ModelStatisticsRequest {
            name: "digits".into(),
            version: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(stats.model_stats.len(), 1);
    assert_eq!(stats.model_stats[0].name, "digits");
    assert_eq!(stats.model_stats[0].inference_count, 1);
    let success = stats.model_stats[0]
        .inference_stats
        .as_ref()
        .and_then(|s| s.success.as_ref())
        .expect("success counts");
    assert_eq!(success.count, 1);

    // The repository: the index is open, load and unload are closed by default.
    let index = client
        .repository_index(RepositoryIndexRequest::default())
        .await
        .unwrap()
        .into_inner();
    let digits = index.models.iter().find(|m| m.name == "digits").expect("digits row");
    assert_eq!((digits.state.as_str(), digits.version.as_str()), ("READY", "1"));
    let unload = RepositoryModelUnloadRequest {
        model_name: "digits".into(),
        ..Default::default()
    };
    let refused = client.repository_model_unload(unload.clone()).await.unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied);
    assert!(refused.message().contains("--admin-token"), "{}", refused.message());
    let load = RepositoryModelLoadRequest {
        model_name: "digits".into(),
        ..Default::default()
    };
    assert_eq!(
        client.repository_model_load(load).await.unwrap_err().code(),
        Code::PermissionDenied
    );
    assert!(
        client
            .model_ready(ready("digits", ""))
            .await
            .unwrap()
            .into_inner()
            .ready
    );
    server.stop().await;
}

/// Health `Check` of `service`, once it reads `want` (the statuses follow the repository
/// within a poll).
async fn wait_for_health(health: &mut HealthClient<Channel>, service: &str, want: ServingStatus) {
    let mut last = None;
    for _ in 0..100 {
        let answer = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await;
        match &answer {
            Ok(r) if r.get_ref().status == want as i32 => return,
            _ => last = Some(answer),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("health of {service:?} never became {want:?}: {last:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_follows_load_and_unload_with_the_admin_token() {
    let mut config = common::serve_config(repository());
    config.admin_token = Some("s3cret".into());
    let (server, mut client) = start(config).await;
    let mut health = HealthClient::new(channel(&server).await);
    wait_for_health(&mut health, "", ServingStatus::Serving).await;
    wait_for_health(&mut health, "inference.GRPCInferenceService", ServingStatus::Serving).await;
    wait_for_health(&mut health, "digits", ServingStatus::Serving).await;
    let unknown = health
        .check(HealthCheckRequest { service: "nope".into() })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound);

    let unload = || RepositoryModelUnloadRequest {
        model_name: "digits".into(),
        ..Default::default()
    };
    // With a token set, a call without it is unauthenticated, even for the index.
    assert_eq!(
        client.repository_model_unload(unload()).await.unwrap_err().code(),
        Code::Unauthenticated
    );
    assert_eq!(
        client
            .repository_index(RepositoryIndexRequest::default())
            .await
            .unwrap_err()
            .code(),
        Code::Unauthenticated
    );
    let mut wrong = Request::new(unload());
    wrong
        .metadata_mut()
        .insert("authorization", "Bearer nope".parse().unwrap());
    assert_eq!(
        client.repository_model_unload(wrong).await.unwrap_err().code(),
        Code::Unauthenticated
    );
    let mut with_token = Request::new(unload());
    with_token
        .metadata_mut()
        .insert("authorization", "Bearer s3cret".parse().unwrap());
    client.repository_model_unload(with_token).await.expect("unload");
    let gone = client
        .model_ready(ModelReadyRequest {
            name: "digits".into(),
            version: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(gone.code(), Code::NotFound);
    wait_for_health(&mut health, "digits", ServingStatus::NotServing).await;

    let mut load = Request::new(RepositoryModelLoadRequest {
        model_name: "digits".into(),
        ..Default::default()
    });
    load.metadata_mut()
        .insert("authorization", "Bearer s3cret".parse().unwrap());
    client.repository_model_load(load).await.expect("load");
    wait_for_health(&mut health, "digits", ServingStatus::Serving).await;
    let (_, labels) = digits_answer(
        &client
            .model_infer(digits_request(&cases()[0].pixels, 1, false))
            .await
            .expect("served again")
            .into_inner(),
    );
    assert_eq!(labels, [cases()[0].predict]);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflection_lists_the_services_and_streams_answer_in_order() {
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    use tonic_reflection::pb::v1::ServerReflectionRequest;

    let (server, mut client) = start(common::serve_config(repository())).await;
    let mut reflection = ServerReflectionClient::new(channel(&server).await);
    let list = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut answers = reflection
        .server_reflection_info(tokio_stream::iter(vec![list]))
        .await
        .expect("reflection")
        .into_inner();
    let answer = answers.message().await.expect("answer").expect("one answer");
    let Some(MessageResponse::ListServicesResponse(list)) = answer.message_response else {
        panic!("not a service list: {answer:?}");
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    for name in ["inference.GRPCInferenceService", "grpc.health.v1.Health"] {
        assert!(names.iter().any(|n| n == name), "{name} missing from {names:?}");
    }

    {
        use tonic_reflection::pb::v1alpha::server_reflection_client::ServerReflectionClient;
        use tonic_reflection::pb::v1alpha::server_reflection_request::MessageRequest;
        use tonic_reflection::pb::v1alpha::server_reflection_response::MessageResponse;
        use tonic_reflection::pb::v1alpha::ServerReflectionRequest;
        let mut reflection = ServerReflectionClient::new(channel(&server).await);
        let list = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        };
        let answer = reflection
            .server_reflection_info(tokio_stream::iter(vec![list]))
            .await
            .expect("v1alpha reflection")
            .into_inner()
            .message()
            .await
            .expect("answer")
            .expect("one answer");
        let Some(MessageResponse::ListServicesResponse(list)) = answer.message_response else {
            panic!("not a service list: {answer:?}");
        };
        assert!(list.service.iter().any(|s| s.name == "inference.GRPCInferenceService"));
    }

    // ModelStreamInfer: one answer per request, in order; a failure does not end the stream.
    let all = cases();
    let mut bad = all[1].pixels.clone();
    bad[5] = 99.0;
    let requests = vec![
        digits_request(&all[0].pixels, 1, false),
        digits_request(&bad, 1, true),
        digits_request(&all[2].pixels, 1, true),
    ];
    let mut answers = client
        .model_stream_infer(tokio_stream::iter(requests))
        .await
        .expect("stream")
        .into_inner();
    let mut got = Vec::new();
    while let Some(answer) = answers.message().await.expect("stream answer") {
        got.push(answer);
    }
    assert_eq!(got.len(), 3);
    assert_eq!(
        digits_answer(got[0].infer_response.as_ref().unwrap()).1,
        [all[0].predict]
    );
    assert!(got[1].infer_response.is_none());
    assert!(
        got[1].error_message.contains("pixel value 99"),
        "{}",
        got[1].error_message
    );
    assert_eq!(
        digits_answer(got[2].infer_response.as_ref().unwrap()).1,
        [all[2].predict]
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_finishes_calls_in_flight_and_ends_health_watches() {
    // Items wait up to 1.5 s in the queue for company: they are in flight at the stop.
    let repository = crate::common::faulty_repository(&crate::common::faulty_config(
        "max_batch_size = 64\nmax_queue_delay_us = 1500000",
        "instances = 1",
    ));
    let (server, client) = start(common::serve_config(repository.path())).await;
    let mut health = HealthClient::new(channel(&server).await);
    wait_for_health(&mut health, "faulty", ServingStatus::Serving).await;
    let mut watch = health
        .watch(HealthCheckRequest { service: String::new() })
        .await
        .expect("watch")
        .into_inner();
    let first = watch.message().await.expect("watch answer").expect("a status");
    assert_eq!(first.status, ServingStatus::Serving as i32);

    let calls: Vec<_> = (0..4)
        .map(|i| {
            let mut client = client.clone();
            tokio::spawn(async move {
                let message = ModelInferRequest {
                    model_name: "faulty".into(),
                    inputs: vec![InferInputTensor {
                        name: "x".into(),
                        datatype: "FP32".into(),
                        shape: vec![1, 1],
                        parameters: HashMap::new(),
                        contents: Some(InferTensorContents {
                            fp32_contents: vec![i as f32],
                            ..Default::default()
                        }),
                    }],
                    ..Default::default()
                };
                client.model_infer(message).await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let stopping = std::time::Instant::now();
    server.stop().await;
    // Well within the 30 s grace period: the open Watch did not hold the shutdown back.
    assert!(stopping.elapsed() < Duration::from_secs(10), "{:?}", stopping.elapsed());
    for (i, call) in calls.into_iter().enumerate() {
        let response = call.await.unwrap().expect("call finished during shutdown").into_inner();
        let y = f32::from_le_bytes(response.raw_output_contents[0][..4].try_into().unwrap());
        assert_eq!(y, 2.0 * i as f32);
    }
    let mut statuses = Vec::new();
    while let Ok(Some(answer)) = watch.message().await {
        statuses.push(answer.status);
    }
    assert_eq!(
        statuses.last(),
        Some(&(ServingStatus::NotServing as i32)),
        "{statuses:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_are_limited_to_the_rest_body_limit() {
    let mut config = common::serve_config(repository());
    config.max_body_bytes = 4096;
    let (server, mut client) = start(config).await;
    let all = cases();
    let pixels: Vec<f32> = all[..4].iter().flat_map(|c| c.pixels.clone()).collect();
    assert!(client.model_infer(digits_request(&pixels, 4, true)).await.is_ok());
    let pixels: Vec<f32> = all[..20].iter().flat_map(|c| c.pixels.clone()).collect();
    let refused = client
        .model_infer(digits_request(&pixels, 20, true))
        .await
        .expect_err("over the limit");
    assert_eq!(refused.code(), Code::OutOfRange, "{refused:?}");
    assert!(refused.message().contains("4096"), "{}", refused.message());
    server.stop().await;
}

/// A message whose entries would cost far more decoded than they weigh is refused on
/// its wire bytes, before prost builds it: many empty inputs, and packed one-byte int64
/// values (eight bytes each decoded).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn costly_messages_are_refused_before_decoding() {
    let (server, client) = start(common::serve_config(repository())).await;
    let client = client.max_encoding_message_size(usize::MAX);
    let send = |request: ModelInferRequest| {
        let mut client = client.clone();
        async move { client.model_infer(request).await }
    };
    let empty_inputs = ModelInferRequest {
        model_name: "digits".into(),
        inputs: vec![InferInputTensor::default(); 1_500_000],
        ..Default::default()
    };
    let started = std::time::Instant::now();
    let refused = send(empty_inputs).await.expect_err("refused");
    assert_eq!(refused.code(), Code::InvalidArgument);
    assert!(
        refused.message().contains("inputs: more than 1024 entries"),
        "{}",
        refused.message()
    );
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());

    let amplified = ModelInferRequest {
        model_name: "digits".into(),
        inputs: vec![InferInputTensor {
            name: "input-0".into(),
            datatype: "INT64".into(),
            shape: vec![8 << 20],
            contents: Some(tensorplug::protocol::grpc::proto::InferTensorContents {
                int64_contents: vec![1; 8 << 20],
                ..Default::default()
            }),
            ..Default::default()
        }],
        ..Default::default()
    };
    let refused = send(amplified).await.expect_err("refused");
    assert_eq!(refused.code(), Code::InvalidArgument);
    assert!(refused.message().contains("would decode to"), "{}", refused.message());
    drop(client);
    server.stop().await;
}

/// `--grpc-port 0`, as `--http-port 0`: any free port, announced in the log once bound,
/// where gRPC answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_port_zero_binds_a_free_port_and_logs_it() {
    let server = ServerProcess::spawn(&repository(), &["--grpc-port", "0"]).await;
    let address = server.grpc_address();
    assert_ne!(address.port(), 0, "{:?}", server.log());
    assert_ne!(address, server.address);
    let mut client = grpc::client(address).await;
    let ready = client.server_ready(ServerReadyRequest {}).await.expect("ServerReady");
    assert!(ready.get_ref().ready);
}

/// `--grpc-port off`: REST serves (the start waits until it is ready) and no gRPC port is
/// announced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_port_off_serves_no_grpc() {
    let server = ServerProcess::spawn(&repository(), &["--grpc-port", "off"]).await;
    assert!(!server.log().iter().any(|l| l.contains(" grpc=")), "{:?}", server.log());
}
