//! End to end: the gRPC edge as strict as the REST edge, read with a raw HTTP/2 client.
//! Every RPC (the health and reflection services too) answers a malformed message or
//! framing `INVALID_ARGUMENT`, never `INTERNAL` (random mutations: limits/grpc_edge.rs);
//! a message cut short is held only until the body read timeout; the
//! connection advertises its stream cap; and the item-status trailer survives any item
//! message.

use std::time::{Duration, Instant};

use prost::Message;
use tensorplug::app::config::{ConnectionArgs, ServeConfig};

use tonic::Code;

use crate::common::grpc::faulty_request;
use crate::common::grpc_raw::{frame, RawAnswer, RawClient};
use crate::common::{self, TestServer};

const WITHIN: Duration = Duration::from_secs(20);

use crate::common::grpc::MODEL_INFER;
const STREAM_INFER: &str = "/inference.GRPCInferenceService/ModelStreamInfer";

/// Every RPC the server serves, and whether its request has a string field 1 (so that
/// invalid UTF-8 or a wrong wire type there is an error, not an unknown field skipped).
const RPCS: [(&str, bool); 15] = [
    ("/inference.GRPCInferenceService/ServerLive", false),
    ("/inference.GRPCInferenceService/ServerReady", false),
    ("/inference.GRPCInferenceService/ServerMetadata", false),
    ("/inference.GRPCInferenceService/ModelReady", true),
    ("/inference.GRPCInferenceService/ModelMetadata", true),
    (MODEL_INFER, true),
    (STREAM_INFER, true),
    ("/inference.GRPCInferenceService/ModelStatistics", true),
    ("/inference.GRPCInferenceService/RepositoryIndex", true),
    ("/inference.GRPCInferenceService/RepositoryModelLoad", true),
    ("/inference.GRPCInferenceService/RepositoryModelUnload", true),
    ("/grpc.health.v1.Health/Check", true),
    ("/grpc.health.v1.Health/Watch", true),
    ("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", true),
    ("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", true),
];

fn faulty_config(limits: &str) -> ServeConfig {
    let repository = common::faulty_repository(&common::faulty_config("max_batch_size = 8", limits));
    let config = common::serve_config(repository.path());
    // The folder must outlive the server: leaked for the test's life.
    std::mem::forget(repository);
    config
}

async fn faulty_server(config: ServeConfig) -> (TestServer, RawClient) {
    let server = TestServer::start_with_grpc(config).await;
    let client = RawClient::connect(server.grpc_address()).await;
    (server, client)
}

/// The trailer, checked to be what any client can read: visible ASCII, JSON, with the
/// whole answer's metadata far within grpc-core's default 8 KiB.
fn item_statuses(answer: &RawAnswer) -> Vec<serde_json::Value> {
    let value = answer
        .status_headers()
        .get("tensorplug-item-status")
        .unwrap_or_else(|| panic!("no item-status trailer in {answer:?}"));
    assert!(
        value.as_bytes().iter().all(|&b| b == b' ' || b.is_ascii_graphic()),
        "{value:?}"
    );
    assert!(
        answer.metadata_bytes() <= 6 * 1024,
        "{} bytes of metadata",
        answer.metadata_bytes()
    );
    serde_json::from_slice(value.as_bytes()).expect("the trailer is JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_item_messages_leave_a_readable_item_status_trailer() {
    let (server, client) = faulty_server(faulty_config("timeout_ms = 5000")).await;
    for values in [vec![-50.0], vec![-12.0], vec![1.0, -50.0, -12.0, 3.0, -5.0]] {
        let message = faulty_request(&values).encode_to_vec();
        let answer = client
            .call(MODEL_INFER, vec![frame(&message)], true, WITHIN)
            .await
            .expect("an answer");
        let status = answer.status();
        assert_eq!(status.code(), Code::InvalidArgument, "{values:?}: {status:?}");
        let items = item_statuses(&answer);
        let expect: Vec<u64> = values.iter().map(|&v| if v < 0.0 { 422 } else { 200 }).collect();
        let got: Vec<u64> = items.iter().map(|i| i["status"].as_u64().unwrap()).collect();
        assert_eq!(got, expect, "{values:?}: {items:?}");
        if values[0] == -50.0 {
            let error = items[0]["error"].as_str().expect("the message, clipped");
            assert!(
                error.starts_with("faulty: hostile \r\n\0 \u{7f} \u{1b}[31m é 漢字 🦀"),
                "{error:?}"
            );
        }
    }
    server.stop().await;
}

/// Protobuf by hand: a field's key.
fn key(field: u8, wire: u8) -> u8 {
    (field << 3) | wire
}

/// Malformed protobuf for a request whose field 1 is a string (or any request, if
/// `string_field` is false), each with what it is.
fn malformed_messages(string_field: bool) -> Vec<(&'static str, Vec<u8>)> {
    let mut messages = vec![
        ("field number 0", vec![key(0, 2), 0]),
        ("an over-long varint", vec![0xff; 11]),
        ("a length past the end", vec![key(1, 2), 5, b'a']),
        ("wire type 7", vec![key(1, 7), 0]),
        ("a truncated varint", vec![key(2, 0), 0x80]),
    ];
    if string_field {
        messages.push(("invalid UTF-8 in a string", vec![key(1, 2), 2, 0xff, 0xfe]));
        messages.push(("a wrong wire type", vec![key(1, 0), 1]));
    }
    messages
}

/// A `ModelInferRequest` whose one input holds 5 bytes of packed FP32.
fn five_bytes_of_fp32() -> Vec<u8> {
    let contents = [key(6, 2), 5, 0, 0, 128, 63, 0];
    let mut input = vec![
        key(1, 2),
        1,
        b'x',
        key(2, 2),
        4,
        b'F',
        b'P',
        b'3',
        b'2',
        key(3, 2),
        1,
        1,
    ];
    input.extend([key(5, 2), contents.len() as u8]);
    input.extend(contents);
    let mut message = vec![key(1, 2), 6];
    message.extend(b"faulty");
    message.extend([key(5, 2), input.len() as u8]);
    message.extend(input);
    message
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_messages_and_framing_are_invalid_argument_on_every_rpc() {
    let (server, client) = faulty_server(faulty_config("timeout_ms = 5000")).await;
    let mut checked = 0;
    for (path, string_field) in RPCS {
        let mut cases: Vec<(String, Vec<Vec<u8>>, bool, Code)> = malformed_messages(string_field)
            .into_iter()
            .map(|(what, message)| (what.to_owned(), vec![frame(&message)], true, Code::InvalidArgument))
            .collect();
        let valid = frame(&[]);
        cases.push((
            "a message cut short, then END_STREAM".into(),
            vec![valid[..3].to_vec()],
            true,
            Code::InvalidArgument,
        ));
        let mut short = frame(&[key(15, 0), 1]);
        short.pop();
        cases.push((
            "a payload one byte short, then END_STREAM".into(),
            vec![short],
            true,
            Code::InvalidArgument,
        ));
        let mut flag = frame(&[]);
        flag[0] = 2;
        cases.push(("compressed flag 2".into(), vec![flag], true, Code::InvalidArgument));
        // The spec's one exception: a compressed message without grpc-encoding is INTERNAL.
        let mut compressed = frame(&[]);
        compressed[0] = 1;
        cases.push((
            "compressed flag 1 without grpc-encoding".into(),
            vec![compressed],
            true,
            Code::Internal,
        ));
        let client_streaming = path == STREAM_INFER || path.ends_with("ServerReflectionInfo");
        if !client_streaming {
            cases.push(("no message".into(), Vec::new(), true, Code::InvalidArgument));
            // (A valid Watch streams on, so it has no second-message case.)
            if !path.ends_with("Watch") {
                cases.push((
                    "two messages".into(),
                    vec![frame(&[]), frame(&[])],
                    true,
                    Code::InvalidArgument,
                ));
            }
        }
        if path == MODEL_INFER || path == STREAM_INFER {
            cases.push((
                "5 bytes of packed FP32".into(),
                vec![frame(&five_bytes_of_fp32())],
                true,
                Code::InvalidArgument,
            ));
        }
        for (what, chunks, end, expect) in cases {
            let answer = client
                .call(path, chunks, end, WITHIN)
                .await
                .unwrap_or_else(|| panic!("{path}, {what}: no answer"));
            let status = answer.status();
            if what == "two messages" {
                // tonic reads one message of a unary call; a second is the client's mistake
                // or ignored, never INTERNAL.
                assert_ne!(status.code(), Code::Internal, "{path}, {what}: {status:?}");
                continue;
            }
            assert_eq!(status.code(), expect, "{path}, {what}: {status:?}");
            checked += 1;
        }
    }
    eprintln!("{checked} malformed calls answered as the spec asks");
    // The server still serves.
    let answer = client
        .call(
            MODEL_INFER,
            vec![frame(&faulty_request(&[1.0]).encode_to_vec())],
            true,
            WITHIN,
        )
        .await
        .expect("an answer");
    assert_eq!(answer.status().code(), Code::Ok);
    let metrics = crate::common::metrics::scrape(&server).await;
    assert!(metrics.value("tensorplug_grpc_malformed_total", &[]) >= 100.0);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_cut_short_is_held_only_until_the_body_read_timeout() {
    let mut config = faulty_config("timeout_ms = 5000");
    config.connections = ConnectionArgs {
        body_read_timeout_ms: 500,
        ..ConnectionArgs::default()
    };
    config.grpc_max_concurrent_streams = 7;
    let (server, client) = faulty_server(config).await;
    assert_eq!(client.max_concurrent_streams().await, 7);
    let full = frame(&faulty_request(&[1.0]).encode_to_vec());
    let one_short = full[..full.len() - 1].to_vec();
    for (path, chunks) in [
        (MODEL_INFER, vec![one_short.clone()]),
        (MODEL_INFER, Vec::new()),
        (STREAM_INFER, vec![one_short.clone()]),
        // A stream's first message answered, its second cut short.
        (STREAM_INFER, vec![full.clone(), one_short.clone()]),
        ("/grpc.health.v1.Health/Check", {
            let check = frame(&[key(1, 2), 1, b'a']);
            vec![check[..check.len() - 1].to_vec()]
        }),
    ] {
        let started = Instant::now();
        let answer = client.call(path, chunks, false, WITHIN).await.expect("an answer");
        let took = started.elapsed();
        let status = answer.status();
        assert_eq!(status.code(), Code::DeadlineExceeded, "{path}: {status:?}");
        assert!(status.message().contains("body_read_timeout_ms"), "{status:?}");
        assert!(
            took >= Duration::from_millis(450) && took < Duration::from_secs(3),
            "{path}: answered after {took:?}"
        );
    }
    // A stream that waits between messages is not cut off: only a message has a deadline.
    let second = full.clone();
    let answer = client
        .call(STREAM_INFER, vec![full.clone()], false, Duration::from_millis(1500))
        .await;
    assert!(answer.is_none(), "an idle stream was ended: {answer:?}");
    let answer = client
        .call(STREAM_INFER, vec![full, second], true, WITHIN)
        .await
        .expect("an answer");
    assert_eq!(answer.status().code(), Code::Ok);
    let metrics = crate::common::metrics::scrape(&server).await;
    assert_eq!(
        metrics.value("tensorplug_grpc_timed_out_total", &[("timeout", "message_read")]),
        5.0
    );
    server.stop().await;
}

/// A 16 MiB answer (fault -51), given to HTTP/2 in 64 KiB pieces, arrives whole and
/// intact, once as a unary answer and twice on one stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_answers_arrive_whole_in_pieces() {
    let repository = common::faulty_repository(
        "[stages]\npredict = \"predict.wasm\"\n\n[[inputs]]\nname = \"x\"\ndatatype = \"FP32\"\nshape = [1]\n\n\
         [[outputs]]\nname = \"y\"\ndatatype = \"FP32\"\nshape = [-1]\n\n[batching]\nmax_batch_size = 1\n\n\
         [limits]\nmemory_mib = 256\ntimeout_ms = 20000\n",
    );
    let server = TestServer::start_with_grpc(common::serve_config(repository.path())).await;
    let mut client = server.grpc_client().await.max_decoding_message_size(usize::MAX);
    let check = |raw: &[Vec<u8>]| {
        assert_eq!(raw.len(), 1);
        assert_eq!(raw[0].len(), 16 << 20);
        let expect = (-102.0f32).to_le_bytes();
        assert!(raw[0].chunks(4).all(|v| v == expect), "the answer's values");
    };
    let answer = client.model_infer(faulty_request(&[-51.0])).await.expect("an answer");
    check(&answer.get_ref().raw_output_contents);
    let requests = tokio_stream::iter(vec![faulty_request(&[-51.0]), faulty_request(&[-51.0])]);
    let mut answers = client
        .model_stream_infer(requests)
        .await
        .expect("a stream")
        .into_inner();
    for _ in 0..2 {
        let answer = answers.message().await.expect("an answer").expect("a message");
        assert_eq!(answer.error_message, "");
        check(&answer.infer_response.expect("a response").raw_output_contents);
    }
    server.stop().await;
}
