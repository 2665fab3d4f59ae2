//! The gRPC edge under attack, measured on the real binary: answers a client never
//! reads, messages just under the size limit, random mutations of a valid request, and an
//! item message written to break headers. (`TENSORPLUG_TEST_BINARY` runs them against
//! another build, for "before" figures.)

use std::time::{Duration, Instant};

use bytes::Bytes;
use prost::Message;
use tensorplug::protocol::grpc::proto::model_infer_request::InferInputTensor;
use tensorplug::protocol::grpc::proto::{InferTensorContents, ModelInferRequest};
use tonic::Code;

use crate::common;
use crate::common::grpc::faulty_request;
use common::grpc_raw::{frame, RawClient};
use common::process::ServerProcess;

const MIB: u64 = 1024 * 1024;

/// The faulty model with a variable-width output (fault -51 answers 16 MiB per item),
/// room for such answers in its instance, and one instance.
fn wide_faulty_repository() -> tempfile::TempDir {
    common::faulty_repository(
        "[stages]\npredict = \"predict.wasm\"\n\n[[inputs]]\nname = \"x\"\ndatatype = \"FP32\"\nshape = [1]\n\n\
         [[outputs]]\nname = \"y\"\ndatatype = \"FP32\"\nshape = [-1]\n\n[batching]\nmax_batch_size = 1\n\n\
         [limits]\ninstances = 1\nmemory_mib = 256\ntimeout_ms = 10000\n",
    )
}

fn wide_request() -> Vec<u8> {
    frame(
        &ModelInferRequest {
            model_name: "faulty".into(),
            inputs: vec![InferInputTensor {
                name: "x".into(),
                datatype: "FP32".into(),
                shape: vec![1, 1],
                contents: Some(InferTensorContents {
                    fp32_contents: vec![-51.0],
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }
        .encode_to_vec(),
    )
}

/// 16 streams each send 4 requests whose answers are 16 MiB, and never read: each
/// stream is served one answer (the rest wait), the server's peak memory stays near
/// those 16 answers, and each is dropped once left unread for the idle timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unread_stream_answers_stay_bounded_and_time_out() {
    const STREAMS: usize = 16;
    const ANSWER: u64 = 16 * MIB;
    let _alone = crate::ONE_AT_A_TIME.lock().await;
    let repository = wide_faulty_repository();
    let server = ServerProcess::spawn(repository.path(), &["--idle-timeout-ms", "20000", "--grpc-port", "0"]).await;
    let grpc = server.grpc_address();
    let before = server.rss_kib();
    server.reset_peak_rss();
    let mut held = Vec::new();
    for _ in 0..STREAMS {
        let tcp = tokio::net::TcpStream::connect(grpc).await.expect("connect");
        let (send, connection) = h2::client::handshake(tcp).await.expect("handshake");
        tokio::spawn(async move {
            let _ = connection.await;
        });
        let request = tonic::codegen::http::Request::post(format!(
            "http://{grpc}/inference.GRPCInferenceService/ModelStreamInfer"
        ))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .expect("request");
        let mut send = send.ready().await.expect("ready");
        let (response, mut stream) = send.send_request(request, false).expect("send");
        for _ in 0..4 {
            stream.send_data(Bytes::from(wide_request()), false).expect("send data");
        }
        // Never polled: the answer is never read.
        held.push((send, response, stream));
    }
    let started = Instant::now();
    let scrape = || async {
        server
            .client
            .get(server.url("/metrics"))
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .expect("text")
    };
    let served = |metrics: &str| -> f64 {
        metrics
            .lines()
            .filter(|l| l.starts_with("tensorplug_grpc_requests_total{") && l.contains("ModelStreamInfer"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    // Each stream's first request is served...
    while served(&scrape().await) < STREAMS as f64 {
        assert!(
            started.elapsed() < Duration::from_secs(40),
            "the streams' first requests were not all served"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // ...and no other: the next ones wait for the client to read (measured 10 s after
    // the requests were sent, as the issue measured).
    let settled = (started + Duration::from_secs(10)).max(Instant::now() + Duration::from_secs(1));
    tokio::time::sleep_until(settled.into()).await;
    let peak = server.peak_rss_kib();
    let grew = peak.saturating_sub(before) / 1024;
    let answered = served(&scrape().await);
    eprintln!("{STREAMS} unread streams of 4 x 16 MiB answers: {answered} answered, peak RSS +{grew} MiB");
    assert_eq!(answered, STREAMS as f64, "streams served past an unread answer");
    // 16 answers held, plus what computing one costs.
    let bound = STREAMS as u64 * ANSWER / MIB + 128;
    assert!(grew <= bound, "peak RSS grew by {grew} MiB (bound {bound} MiB)");
    // Past the idle timeout every held answer is dropped.
    loop {
        let metrics = scrape().await;
        let dropped = metrics
            .lines()
            .find(|l| l.starts_with("tensorplug_grpc_timed_out_total{timeout=\"answer_unread\"}"))
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or(0.0);
        if dropped == STREAMS as f64 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(80),
            "answers still held: {dropped} dropped"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(held);
}

/// The REST edge's bound on what decoding a body may cost (see limits/hostile.rs).
fn memory_bound_kib(body_len: usize) -> u64 {
    (6 * body_len as u64 + 32 * MIB) / 1024
}

/// Requests just under the 64 MiB message limit, in each way a tensor can come — packed
/// FP32, raw bytes, many `bytes_contents` — decode within the same bound as a REST body
/// of their size (each is then refused for its shape, after decoding).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn near_limit_messages_decode_within_the_rest_bound() {
    let _alone = crate::ONE_AT_A_TIME.lock().await;
    let server = ServerProcess::spawn(&common::examples(), &["--grpc-port", "0"]).await;
    let client = RawClient::connect(server.grpc_address()).await;
    let size = 63 * MIB as usize;
    let input = |datatype: &str, contents: InferTensorContents| InferInputTensor {
        name: "input-0".into(),
        datatype: datatype.into(),
        // Not digits' shape: refused once decoded.
        shape: vec![1, 3],
        contents: Some(contents),
        ..Default::default()
    };
    let cases = [
        (
            "packed fp32_contents",
            ModelInferRequest {
                model_name: "digits".into(),
                inputs: vec![input(
                    "FP32",
                    InferTensorContents {
                        fp32_contents: vec![1.5; size / 4],
                        ..Default::default()
                    },
                )],
                ..Default::default()
            },
        ),
        (
            // 2-byte varints decoding to 8 bytes each: 4 x the message, which the old
            // content budget let through to be decoded and converted (its shape fits);
            // refused before decoding now.
            "packed int64 of 2-byte varints (4 x the message)",
            ModelInferRequest {
                model_name: "digits".into(),
                inputs: vec![InferInputTensor {
                    shape: vec![(size / 2 / 64) as i64, 64],
                    ..input(
                        "INT64",
                        InferTensorContents {
                            int64_contents: vec![300; size / 2 / 64 * 64],
                            ..Default::default()
                        },
                    )
                }],
                ..Default::default()
            },
        ),
        (
            // 5-byte varints: 1.6 x the message, within the budget, with a shape that
            // fits, so that the values are decoded and made into tensor bytes before
            // the model refuses the datatype.
            "packed int64 of 5-byte varints (1.6 x the message), decoded and converted",
            ModelInferRequest {
                model_name: "digits".into(),
                inputs: vec![InferInputTensor {
                    shape: vec![(size / 5 / 64) as i64, 64],
                    ..input(
                        "INT64",
                        InferTensorContents {
                            int64_contents: vec![1 << 30; size / 5 / 64 * 64],
                            ..Default::default()
                        },
                    )
                }],
                ..Default::default()
            },
        ),
        (
            "raw_input_contents",
            ModelInferRequest {
                model_name: "digits".into(),
                inputs: vec![InferInputTensor {
                    contents: None,
                    ..input("FP32", InferTensorContents::default())
                }],
                raw_input_contents: vec![vec![7; size]],
                ..Default::default()
            },
        ),
        (
            "bytes_contents of 64 bytes each",
            ModelInferRequest {
                model_name: "digits".into(),
                inputs: vec![input(
                    "BYTES",
                    InferTensorContents {
                        bytes_contents: vec![vec![b'a'; 64]; size / 66],
                        ..Default::default()
                    },
                )],
                ..Default::default()
            },
        ),
    ];
    for (what, message) in cases {
        let body = frame(&message.encode_to_vec());
        drop(message);
        let len = body.len();
        let before = server.rss_kib();
        server.reset_peak_rss();
        let chunks: Vec<Vec<u8>> = body.chunks(1 << 20).map(<[u8]>::to_vec).collect();
        drop(body);
        let answer = client
            .call(common::grpc::MODEL_INFER, chunks, true, Duration::from_secs(60))
            .await
            .expect("an answer");
        let peak = server.peak_rss_kib();
        let status = answer.status();
        assert_eq!(status.code(), Code::InvalidArgument, "{what}: {status:?}");
        let grew = peak.saturating_sub(before);
        eprintln!(
            "{what}: {} MiB message, peak RSS +{} MiB",
            len as u64 / MIB,
            grew / 1024
        );
        assert!(
            grew <= memory_bound_kib(len),
            "{what}: peak RSS grew by {} MiB for a {} MiB message (bound {} MiB)",
            grew / 1024,
            len as u64 / MIB,
            memory_bound_kib(len) / 1024
        );
    }
}

/// Random mutations of a valid request, sent byte for byte: never `INTERNAL` (the
/// model, digits, has no faults of its own), and the server keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutated_requests_never_get_internal() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    use std::collections::BTreeMap;

    const CASES: u32 = 5000;
    let _alone = crate::ONE_AT_A_TIME.lock().await;
    let mut server = ServerProcess::spawn(&common::examples(), &["--grpc-port", "0"]).await;
    let client = RawClient::connect(server.grpc_address()).await;
    let good = ModelInferRequest {
        model_name: "digits".into(),
        id: "a".into(),
        inputs: vec![InferInputTensor {
            name: "input-0".into(),
            datatype: "FP32".into(),
            shape: vec![2, 64],
            contents: Some(InferTensorContents {
                fp32_contents: vec![3.0; 128],
                ..Default::default()
            }),
            ..Default::default()
        }],
        ..Default::default()
    }
    .encode_to_vec();
    // Each mutation: at some position, overwrite, insert or delete a few bytes.
    let mutation = (0..good.len(), 0usize..3, 0usize..4, any::<u8>(), 1usize..3);
    let cases = proptest::collection::vec(mutation, 1..4);
    let mut runner = TestRunner::new_with_rng(
        Config {
            cases: CASES,
            failure_persistence: None,
            ..Config::default()
        },
        TestRng::from_seed(RngAlgorithm::ChaCha, &[18; 32]),
    );
    let runtime = tokio::runtime::Handle::current();
    let codes = std::sync::Mutex::new(BTreeMap::<String, usize>::new());
    let internal = std::sync::Mutex::new(Vec::new());
    tokio::task::block_in_place(|| {
        runner
            .run(&cases, |mutations| {
                let mut message = good.clone();
                for (at, kind, len, byte, count) in mutations {
                    let at = at.min(message.len());
                    let bytes = vec![byte; count];
                    match kind {
                        0 => {
                            let end = (at + bytes.len()).min(message.len());
                            message.splice(at..end, bytes);
                        }
                        1 => {
                            message.splice(at..at, bytes);
                        }
                        _ => {
                            message.drain(at..(at + len).min(message.len()));
                        }
                    }
                }
                let answer = runtime
                    .block_on(client.call(
                        common::grpc::MODEL_INFER,
                        vec![frame(&message)],
                        true,
                        Duration::from_secs(30),
                    ))
                    .expect("an answer");
                let status = answer.status();
                *codes.lock().unwrap().entry(format!("{:?}", status.code())).or_default() += 1;
                if status.code() == Code::Internal {
                    internal.lock().unwrap().push(status.message().to_owned());
                }
                Ok(())
            })
            .expect("every case runs");
    });
    let internal = internal.into_inner().unwrap();
    eprintln!(
        "codes of {CASES} mutated requests: {:?}; INTERNAL: {}, e.g. {:?}",
        codes.lock().unwrap(),
        internal.len(),
        internal.iter().take(3).collect::<Vec<_>>()
    );
    assert!(internal.is_empty(), "{} mutated requests got INTERNAL", internal.len());
    assert!(server.is_alive());
}

/// An item message holding control characters, CR/LF, NUL, DEL and non-ASCII (fault
/// -50): its answer still carries the item-status trailer, readable by any client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_item_message_leaves_the_item_status_trailer() {
    let _alone = crate::ONE_AT_A_TIME.lock().await;
    let repository = common::faulty_repository(&common::faulty_config("max_batch_size = 8", "timeout_ms = 5000"));
    let server = ServerProcess::spawn(repository.path(), &["--grpc-port", "0"]).await;
    let client = RawClient::connect(server.grpc_address()).await;
    for values in [vec![-50.0], vec![1.0, -50.0, -12.0]] {
        let message = faulty_request(&values);
        let answer = client
            .call(
                common::grpc::MODEL_INFER,
                vec![frame(&message.encode_to_vec())],
                true,
                Duration::from_secs(30),
            )
            .await;
        let Some(answer) = answer else {
            panic!("{values:?}: no answer (the client refused the answer's headers)");
        };
        let trailer = answer.status_headers().get("tensorplug-item-status");
        eprintln!(
            "{values:?}: grpc-status {:?}, {} bytes of metadata, tensorplug-item-status: {:?}",
            answer.status_headers().get("grpc-status"),
            answer.metadata_bytes(),
            trailer.map(|t| String::from_utf8_lossy(&t.as_bytes()[..t.len().min(160)]).into_owned())
        );
        let trailer = trailer.unwrap_or_else(|| panic!("{values:?}: no item-status trailer"));
        let items: Vec<serde_json::Value> = serde_json::from_slice(trailer.as_bytes()).expect("JSON");
        assert_eq!(items.len(), values.len());
        assert!(answer.metadata_bytes() <= 6 * 1024);
    }
}

/// Metadata over 16 KiB (HTTP/2's header list, as hyper bounds it by default) is answered
/// `RESOURCE_EXHAUSTED` with a message naming the limit, where h2 alone answers a bare
/// HTTP 431 (gRPC clients: `UNKNOWN`) and closes the connection past 64 KiB; the
/// connection serves its next call. Past the header list HTTP/2 accepts (2 MiB), h2's
/// 431 is what a client gets, and the connection still serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_metadata_is_answered_with_a_status_naming_the_limit() {
    use tensorplug::grpc::edge::{HEADER_LIST_CEILING, MAX_METADATA_BYTES};
    const LIVE: &str = "/inference.GRPCInferenceService/ServerLive";
    const KIB: usize = 1024;
    let _alone = crate::ONE_AT_A_TIME.lock().await;
    let repository = wide_faulty_repository();
    let server = ServerProcess::spawn(repository.path(), &["--grpc-port", "0"]).await;
    let client = RawClient::connect(server.grpc_address()).await;
    let within = Duration::from_secs(20);
    let live = |padding: usize| {
        let client = client.clone();
        async move {
            let value = "m".repeat(padding);
            let headers: &[(&str, &str)] = if padding == 0 { &[] } else { &[("x-padding", &value)] };
            client.call_with(LIVE, headers, vec![frame(&[])], true, within).await
        }
    };
    assert_eq!(live(0).await.expect("answered").status().code(), Code::Ok);
    // Just under the limit: served (the pseudo-headers and te/content-type take ~250 bytes).
    let under = live(MAX_METADATA_BYTES - KIB).await.expect("answered");
    assert_eq!(under.status().code(), Code::Ok, "{:?}", under.status());
    for padding in [20 * KIB, 100 * KIB] {
        let answer = live(padding)
            .await
            .unwrap_or_else(|| panic!("{padding} bytes of metadata: no answer"));
        let status = answer.status();
        println!(
            "{padding} bytes of metadata: HTTP {}, {:?}: {}",
            answer.http_status,
            status.code(),
            status.message()
        );
        assert_eq!(answer.http_status, 200);
        assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
        assert!(
            status
                .message()
                .contains(&format!("over the limit of {MAX_METADATA_BYTES} bytes"))
                && status.message().contains("metadata is"),
            "{status:?}"
        );
        // The same connection goes on serving.
        assert_eq!(
            live(0).await.expect("answered after a refusal").status().code(),
            Code::Ok
        );
    }
    // Past the ceiling: h2's own 431, no gRPC status; the connection goes on serving.
    let past = HEADER_LIST_CEILING as usize + 16 * KIB;
    let answer = live(past).await.expect("answered");
    println!(
        "{past} bytes of metadata: HTTP {}, {:?}",
        answer.http_status, answer.headers
    );
    assert_eq!(answer.http_status, 431);
    assert!(!answer.headers.contains_key("grpc-status"));
    assert_eq!(live(0).await.expect("answered after a 431").status().code(), Code::Ok);
}

/// Metadata no gRPC client sends by accident, as a fuzz run sent it: 10,000 entries, and
/// one 1 MiB value. Both are answered `RESOURCE_EXHAUSTED` naming the limit (once h2's
/// 431, which gRPC clients report as `UNKNOWN`), and the 1 MiB call leaves a
/// `ModelStreamInfer` stream on the same HTTP/2 connection serving (it once took the
/// connection down: h2 counts a header block's CONTINUATION frames against its list size).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_metadata_gets_a_status_and_spares_its_connections_other_calls() {
    use tensorplug::grpc::edge::MAX_METADATA_BYTES;
    let _alone = crate::ONE_AT_A_TIME.lock().await;
    let repository = wide_faulty_repository();
    let server = ServerProcess::spawn(repository.path(), &["--grpc-port", "0"]).await;
    // One channel: one HTTP/2 connection for the stream and the hostile calls.
    let channel = common::grpc::channel(server.grpc_address()).await;
    let mut client =
        tensorplug::protocol::grpc::proto::grpc_inference_service_client::GrpcInferenceServiceClient::new(channel);
    let (send, requests) = tokio::sync::mpsc::unbounded_channel();
    let mut stream = client
        .clone()
        .model_stream_infer(tokio_stream::wrappers::UnboundedReceiverStream::new(requests))
        .await
        .expect("a stream")
        .into_inner();
    let on_stream = |value: f32| {
        send.send(faulty_request(&[value])).expect("the stream takes a message");
    };
    on_stream(1.0);
    let first = stream.message().await.expect("an answer").expect("a message");
    assert_eq!(first.error_message, "");

    let many = {
        let mut request = tonic::Request::new(faulty_request(&[1.0]));
        for k in 0..10_000 {
            let name: tonic::metadata::MetadataKey<tonic::metadata::Ascii> =
                format!("x-entry-{k}").parse().expect("a key");
            request.metadata_mut().insert(name, "v".parse().expect("a value"));
        }
        request
    };
    let one_mib = {
        let mut request = tonic::Request::new(faulty_request(&[1.0]));
        request
            .metadata_mut()
            .insert("x-padding", "m".repeat(1 << 20).parse().expect("a value"));
        request
    };
    for (what, request) in [("10,000 entries", many), ("a 1 MiB value", one_mib)] {
        let refused = client.model_infer(request).await.expect_err("refused");
        assert_eq!(refused.code(), Code::ResourceExhausted, "{what}: {refused:?}");
        assert!(
            refused
                .message()
                .contains(&format!("over the limit of {MAX_METADATA_BYTES} bytes")),
            "{what}: {refused:?}"
        );
        // The stream on the same connection goes on.
        on_stream(2.0);
        let answer = stream
            .message()
            .await
            .unwrap_or_else(|e| panic!("after {what}: the stream ended: {e:?}"))
            .expect("a message");
        assert_eq!(answer.error_message, "", "after {what}");
    }
    // And a new call on it is served.
    assert!(client.model_infer(faulty_request(&[1.0])).await.is_ok());
}
