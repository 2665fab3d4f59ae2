//! Distributed tracing, end to end: the real binary exporting over OTLP/HTTP to a receiver
//! that decodes with OpenTelemetry's own protobuf messages (tests/common/otlp.rs). A
//! request that comes with a W3C context is one tree: the client's span, the edge's
//! server span, the batch that served it, its plugin calls; requests that share a batch
//! each show it; failed items, traps and a plugin's log lines are in the trace, bounded;
//! hostile headers are ignored; a collector that is down or never answers costs no request.

use std::time::Duration;

use serde_json::json;

use crate::common::grpc::{client as grpc_client, faulty_request};
use crate::common::otlp::{Behaviour, Receiver, Span};
use crate::common::process::ServerProcess;
use crate::common::{faulty_config, faulty_repository, FAULTY_INFER};

/// A client's span (its trace and span ids as a `traceparent` would carry them).
struct ClientSpan {
    trace_id: String,
    span_id: String,
}

impl ClientSpan {
    fn new(n: u64) -> ClientSpan {
        ClientSpan {
            trace_id: format!("{:016x}{:016x}", 0x0af7_6519_16cd_43dd_u64, n),
            span_id: format!("{:016x}", 0xb7ad_6b71_6920_3331_u64 ^ n),
        }
    }

    fn traceparent(&self) -> String {
        format!("00-{}-{}-01", self.trace_id, self.span_id)
    }
}

/// A batching window of 300 ms: concurrent requests share a batch.
const SHARED_BATCHES: &str = "max_batch_size = 32\nmax_queue_delay_us = 300000";
/// The faulty model's own window (2 ms).
const QUICK_BATCHES: &str = "max_batch_size = 32\nmax_queue_delay_us = 2000";

/// The faulty model batching as `batching` says, served by a process exporting to
/// `receiver` every 100 ms.
async fn traced_server(receiver: &Receiver, extra: &[&str], batching: &str) -> (ServerProcess, tempfile::TempDir) {
    let repository = faulty_repository(&faulty_config(batching, "memory_mib = 32\ntimeout_ms = 5000"));
    let mut flags = vec!["--otlp-endpoint", receiver.endpoint.as_str()];
    flags.extend_from_slice(extra);
    let server = ServerProcess::spawn_with_env(
        repository.path(),
        &flags,
        &[
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
            ("OTEL_SERVICE_NAME", "tensorplug-under-test"),
        ],
    )
    .await;
    (server, repository)
}

/// POSTs `values` to the faulty model with `headers`; the status, the answer's
/// `traceparent` and its body.
async fn infer(server: &ServerProcess, values: &[f32], headers: &[(&str, &[u8])]) -> (u16, Option<String>, String) {
    let body = json!({"inputs": [{"name": "x", "datatype": "FP32", "shape": [values.len(), 1], "data": values}]});
    let mut request = server.client.post(server.url(FAULTY_INFER)).json(&body);
    for (name, value) in headers {
        request = request.header(
            *name,
            reqwest::header::HeaderValue::from_bytes(value).expect("header value"),
        );
    }
    let response = request.send().await.expect("infer");
    let status = response.status().as_u16();
    let traceparent = response
        .headers()
        .get("traceparent")
        .map(|v| v.to_str().expect("ASCII").to_owned());
    (status, traceparent, response.text().await.expect("body"))
}

/// Header names and values, as a hostile client sends them.
type Headers = Vec<(&'static str, Vec<u8>)>;

fn named<'a>(spans: &'a [Span], name: &str) -> Vec<&'a Span> {
    spans.iter().filter(|s| s.name == name).collect()
}

fn one<'a>(spans: &'a [Span], name: &str) -> &'a Span {
    let found = named(spans, name);
    assert_eq!(found.len(), 1, "one {name} span expected in {spans:#?}");
    found[0]
}

/// Whether a trace holds a server span, a batch span and a predict span (all exported).
fn whole(spans: &[Span]) -> bool {
    [
        "POST /v2/models/{model}/infer",
        "tensorplug.batch",
        "tensorplug.predict",
    ]
    .iter()
    .all(|name| spans.iter().any(|s| s.name == *name))
}

const EXPORTED_WITHIN: Duration = Duration::from_secs(20);

#[tokio::test]
async fn a_rest_request_is_one_tree_from_its_clients_span_to_its_plugin_call() {
    let receiver = Receiver::start(Behaviour::Accept).await;
    let (server, _repository) = traced_server(&receiver, &["--trace-exemplars"], SHARED_BATCHES).await;
    let client = ClientSpan::new(1);
    let (status, traceparent, body) = infer(&server, &[1.5], &[("traceparent", client.traceparent().as_bytes())]).await;
    assert_eq!(status, 200, "{body}");

    // The answer names the server span, in the client's trace, sampled.
    let traceparent = traceparent.expect("the answer carries a traceparent");
    let parts: Vec<&str> = traceparent.split('-').collect();
    assert_eq!((parts[0], parts[1], parts[3]), ("00", client.trace_id.as_str(), "01"));

    let spans = receiver.trace(&client.trace_id, EXPORTED_WITHIN, whole).await;
    let server_span = one(&spans, "POST /v2/models/{model}/infer");
    assert_eq!(
        server_span.parent_span_id, client.span_id,
        "the server span is the client span's child"
    );
    assert_eq!(
        server_span.span_id, parts[2],
        "the answer's traceparent names the server span"
    );
    assert_eq!(server_span.kind, 2, "a server span");
    assert_eq!(server_span.attribute("http.request.method"), Some("POST"));
    assert_eq!(server_span.attribute("http.route"), Some("/v2/models/{model}/infer"));
    assert_eq!(server_span.attribute("http.response.status_code"), Some("200"));
    let batch = one(&spans, "tensorplug.batch");
    assert_eq!(batch.parent_span_id, server_span.span_id);
    assert_eq!(batch.attribute("tensorplug.batch.size"), Some("1"));
    assert_eq!(batch.attribute("tensorplug.model.name"), Some("faulty"));
    assert_eq!(batch.attribute("tensorplug.model.version"), Some("1"));
    let predict = one(&spans, "tensorplug.predict");
    assert_eq!(predict.parent_span_id, batch.span_id);
    assert_eq!(predict.attribute("tensorplug.call.items"), Some("1"));
    assert_eq!(predict.attribute("tensorplug.call.failed"), Some("0"));
    assert!(
        server_span.start_ns <= batch.start_ns && batch.end_ns <= server_span.end_ns,
        "the batch lies within its request"
    );
    assert!(batch.start_ns <= predict.start_ns && predict.end_ns <= batch.end_ns);
    assert!(receiver.service_names().iter().all(|n| n == "tensorplug-under-test"));
    // The tree as docs/operations.md draws it (`--nocapture`).
    println!("{}", tree(&spans, &client.span_id, 0));

    // The request's duration on /metrics points to its trace (an OpenMetrics exemplar).
    let metrics = crate::common::metrics::text_of_process(&server).await;
    let exemplar = format!("# {{trace_id=\"{}\"}}", client.trace_id);
    let bucket = metrics
        .lines()
        .find(|line| line.starts_with("tensorplug_request_duration_seconds_bucket{") && line.contains(&exemplar))
        .unwrap_or_else(|| panic!("no exemplar of the trace in {metrics}"));
    assert!(bucket.contains("model=\"faulty\""), "{bucket}");
}

/// The spans under `parent`, indented, with their durations.
fn tree(spans: &[Span], parent: &str, depth: usize) -> String {
    let mut children: Vec<&Span> = spans.iter().filter(|s| s.parent_span_id == parent).collect();
    children.sort_by_key(|s| s.start_ns);
    children
        .iter()
        .map(|span| {
            format!(
                "{}{} {:.3} ms\n{}",
                "  ".repeat(depth),
                span.name,
                span.millis(),
                tree(spans, &span.span_id, depth + 1)
            )
        })
        .collect()
}

#[tokio::test]
async fn requests_that_share_a_batch_each_show_it() {
    let receiver = Receiver::start(Behaviour::Accept).await;
    let (server, _repository) = traced_server(&receiver, &[], SHARED_BATCHES).await;
    let (first, second) = (ClientSpan::new(2), ClientSpan::new(3));
    // Two items each: no lone-request shortcut; both wait in the queue's 300 ms window.
    let (first_parent, second_parent) = (first.traceparent(), second.traceparent());
    let first_headers = [("traceparent", first_parent.as_bytes())];
    let second_headers = [("traceparent", second_parent.as_bytes())];
    let (a, b) = tokio::join!(
        infer(&server, &[1.0, 2.0], &first_headers),
        infer(&server, &[3.0, 4.0], &second_headers),
    );
    assert_eq!((a.0, b.0), (200, 200));
    let traces = [
        receiver
            .trace(&first.trace_id, EXPORTED_WITHIN, |s| {
                !named(s, "tensorplug.batch").is_empty()
            })
            .await,
        receiver
            .trace(&second.trace_id, EXPORTED_WITHIN, |s| {
                !named(s, "tensorplug.batch").is_empty()
            })
            .await,
    ];
    let batches: Vec<&Span> = traces.iter().map(|t| one(t, "tensorplug.batch")).collect();
    assert_eq!(
        batches[0].attribute("tensorplug.batch.id"),
        batches[1].attribute("tensorplug.batch.id"),
        "one batch served both"
    );
    for batch in &batches {
        assert_eq!(batch.attribute("tensorplug.batch.size"), Some("4"));
        assert_eq!(batch.attribute("tensorplug.batch.requests"), Some("2"));
        assert_eq!(batch.attribute("tensorplug.batch.items"), Some("2"));
    }
    // One trace holds the batch's plugin call; the other links to that trace's batch span.
    let (leader, other) = match named(&traces[0], "tensorplug.predict").len() {
        1 => (0, 1),
        _ => (1, 0),
    };
    let predict = one(&traces[leader], "tensorplug.predict");
    assert_eq!(predict.parent_span_id, batches[leader].span_id);
    assert_eq!(predict.attribute("tensorplug.call.items"), Some("4"));
    assert!(named(&traces[other], "tensorplug.predict").is_empty());
    assert_eq!(
        batches[other].links,
        vec![(batches[leader].trace_id.clone(), batches[leader].span_id.clone())],
        "the other request's batch span links to the leader's"
    );
}

#[tokio::test]
async fn failed_items_a_trap_and_a_log_flood_are_in_the_trace_and_bounded() {
    let receiver = Receiver::start(Behaviour::Accept).await;
    let (server, _repository) = traced_server(&receiver, &[], SHARED_BATCHES).await;

    // 207: item 1 rejected by the plugin (422).
    let multi = ClientSpan::new(4);
    let (status, _, body) = infer(
        &server,
        &[1.0, -5.0, 3.0],
        &[("traceparent", multi.traceparent().as_bytes())],
    )
    .await;
    assert_eq!(status, 207, "{body}");
    let spans = receiver.trace(&multi.trace_id, EXPORTED_WITHIN, whole).await;
    let server_span = one(&spans, "POST /v2/models/{model}/infer");
    assert_eq!(server_span.attribute("http.response.status_code"), Some("207"));
    let failed: Vec<_> = server_span
        .events
        .iter()
        .filter(|(name, _)| name == "tensorplug.item.failed")
        .collect();
    assert_eq!(failed.len(), 1, "{:?}", server_span.events);
    assert_eq!(failed[0].1.get("tensorplug.item.index").map(String::as_str), Some("1"));
    assert_eq!(
        failed[0].1.get("tensorplug.item.status").map(String::as_str),
        Some("422")
    );
    assert_eq!(
        one(&spans, "tensorplug.predict").attribute("tensorplug.call.failed"),
        Some("1")
    );

    // A trap: the call's span is an error, its instance replaced.
    let trap = ClientSpan::new(5);
    let (status, _, _) = infer(&server, &[-1.0], &[("traceparent", trap.traceparent().as_bytes())]).await;
    assert_eq!(status, 500);
    let spans = receiver.trace(&trap.trace_id, EXPORTED_WITHIN, whole).await;
    let predict = one(&spans, "tensorplug.predict");
    assert_eq!(predict.status, 2, "an error");
    assert_eq!(predict.attribute("tensorplug.call.trapped"), Some("true"));
    assert_eq!(predict.attribute("tensorplug.instance.replaced"), Some("true"));
    assert_eq!(one(&spans, "POST /v2/models/{model}/infer").status, 2);

    // A million log lines in one call: its span keeps a bounded number as events.
    let flood = ClientSpan::new(6);
    let (status, _, body) = infer(&server, &[-11.0], &[("traceparent", flood.traceparent().as_bytes())]).await;
    assert_eq!(status, 200, "{body}");
    let spans = receiver.trace(&flood.trace_id, EXPORTED_WITHIN, whole).await;
    let predict = one(&spans, "tensorplug.predict");
    let lines = predict.events.iter().filter(|(name, _)| name == "log").count();
    assert!((1..=128).contains(&lines), "{lines} log events on one span");
    assert_eq!(
        predict.events[0].1.get("log.message").map(String::as_str),
        Some("faulty: flood line 0")
    );
    let left_out: u64 = predict
        .attribute("tensorplug.log.left_out")
        .unwrap_or("0")
        .parse()
        .unwrap();
    assert!(left_out > 0, "the lines past the bound are counted");
}

#[tokio::test]
async fn hostile_trace_headers_are_ignored_and_the_request_answered_as_without_them() {
    let receiver = Receiver::start(Behaviour::Accept).await;
    let (server, _repository) = traced_server(&receiver, &[], SHARED_BATCHES).await;
    let parent = ClientSpan::new(7).traceparent();
    let huge_state = format!("k={}", "v".repeat(100 * 1024));
    let many_entries = (0..5000).map(|i| format!("k{i}=v")).collect::<Vec<_>>().join(",");
    let cases: Vec<(&str, Headers)> = vec![
        ("garbage", vec![("traceparent", b"not-a-traceparent".to_vec())]),
        (
            "all-zero ids",
            vec![(
                "traceparent",
                b"00-00000000000000000000000000000000-0000000000000000-01".to_vec(),
            )],
        ),
        ("invalid UTF-8", vec![("traceparent", b"00-\xff\xfe-\x80-01".to_vec())]),
        (
            "two parents",
            vec![
                ("traceparent", parent.clone().into_bytes()),
                ("traceparent", parent.clone().into_bytes()),
            ],
        ),
        (
            "100 KB of tracestate",
            vec![
                ("traceparent", parent.clone().into_bytes()),
                ("tracestate", huge_state.into_bytes()),
            ],
        ),
        (
            "5000 tracestate entries",
            vec![
                ("traceparent", parent.clone().into_bytes()),
                ("tracestate", many_entries.into_bytes()),
            ],
        ),
        (
            "tracestate not UTF-8",
            vec![
                ("traceparent", parent.clone().into_bytes()),
                ("tracestate", b"a=\xff\xfe".to_vec()),
            ],
        ),
    ];
    for (case, headers) in &cases {
        let headers: Vec<(&str, &[u8])> = headers.iter().map(|(n, v)| (*n, v.as_slice())).collect();
        let (status, traceparent, body) = infer(&server, &[2.0], &headers).await;
        assert_eq!(status, 200, "{case}: {body}");
        assert!(
            body.contains("\"data\":[4.0]"),
            "{case}: answered as without them: {body}"
        );
        let traceparent = traceparent.unwrap_or_else(|| panic!("{case}: no traceparent"));
        assert_eq!(traceparent.len(), 55, "{case}: {traceparent}");
    }
    // A malformed context starts a trace of its own: a root server span.
    let (_, traceparent, _) = infer(&server, &[2.0], &[("traceparent", b"garbage")]).await;
    let trace_id = traceparent.unwrap().split('-').nth(1).unwrap().to_owned();
    let spans = receiver.trace(&trace_id, EXPORTED_WITHIN, whole).await;
    assert_eq!(
        one(&spans, "POST /v2/models/{model}/infer").parent_span_id,
        "",
        "a root span"
    );
}

#[tokio::test]
async fn a_grpc_call_continues_the_trace_in_its_metadata_and_answers_its_own() {
    let receiver = Receiver::start(Behaviour::Accept).await;
    let (server, _repository) = traced_server(&receiver, &["--grpc-port", "0"], SHARED_BATCHES).await;
    let mut client = grpc_client(server.grpc_address()).await;
    let caller = ClientSpan::new(8);
    let mut request = tonic::Request::new(faulty_request(&[1.0]));
    request
        .metadata_mut()
        .insert("traceparent", caller.traceparent().parse().unwrap());
    let response = client.model_infer(request).await.expect("ModelInfer");
    let traceparent = response
        .metadata()
        .get("traceparent")
        .expect("the answer's metadata carries a traceparent")
        .to_str()
        .unwrap()
        .to_owned();
    assert!(traceparent.starts_with(&format!("00-{}-", caller.trace_id)));
    let spans = receiver
        .trace(&caller.trace_id, EXPORTED_WITHIN, |s| {
            !named(s, "tensorplug.predict").is_empty()
                && !named(s, "inference.GRPCInferenceService/ModelInfer").is_empty()
        })
        .await;
    let server_span = one(&spans, "inference.GRPCInferenceService/ModelInfer");
    assert_eq!(server_span.parent_span_id, caller.span_id);
    assert_eq!(server_span.attribute("rpc.system"), Some("grpc"));
    assert_eq!(server_span.attribute("rpc.method"), Some("ModelInfer"));
    assert_eq!(server_span.attribute("rpc.grpc.status_code"), Some("0"));
    let batch = one(&spans, "tensorplug.batch");
    assert_eq!(batch.parent_span_id, server_span.span_id);
    assert_eq!(one(&spans, "tensorplug.predict").parent_span_id, batch.span_id);

    // Hostile metadata within the edge's 16 KiB: the call is answered as without it.
    let entries = (0..2000).map(|i| format!("k{i}=v")).collect::<Vec<_>>().join(",");
    let not_utf8 = tonic::metadata::AsciiMetadataValue::try_from(&b"a=\xff\xfe"[..]).expect("obs-text");
    for (parent, state) in [
        ("00-zz-yy-01", entries.parse().unwrap()),
        (caller.traceparent().as_str(), not_utf8),
    ] {
        let mut hostile = tonic::Request::new(faulty_request(&[1.0]));
        hostile.metadata_mut().insert("traceparent", parent.parse().unwrap());
        hostile.metadata_mut().insert("tracestate", state);
        let answer = client.model_infer(hostile).await.expect("answered");
        assert_eq!(answer.get_ref().outputs[0].name, "y");
    }
    // Past it, the edge's own refusal (RESOURCE_EXHAUSTED), and the connection serves on.
    let mut huge = tonic::Request::new(faulty_request(&[1.0]));
    huge.metadata_mut()
        .insert("tracestate", format!("k={}", "v".repeat(100 * 1024)).parse().unwrap());
    let refused = client.model_infer(huge).await.expect_err("over the metadata limit");
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
    assert!(client.model_infer(faulty_request(&[1.0])).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_down_or_silent_costs_no_request_and_the_queue_stays_bounded() {
    let receiver = Receiver::start(Behaviour::BlackHole).await;
    let (server, _repository) = traced_server(
        &receiver,
        &["--trace-queue-size", "64", "--otlp-timeout-ms", "300"],
        QUICK_BATCHES,
    )
    .await;
    let server = std::sync::Arc::new(server);
    // Warm first (the model's instances, the allocator's arenas), then measure from there.
    for round in 0..20 {
        let span = ClientSpan::new(900_000 + round);
        infer(&server, &[1.0], &[("traceparent", span.traceparent().as_bytes())]).await;
    }
    let rss_before = server.rss_kib();
    server.reset_peak_rss();
    // 16 clients, 40 requests each: far more spans than 64 within one export's 300 ms.
    let mut clients = tokio::task::JoinSet::new();
    for client in 0..16u64 {
        let server = server.clone();
        clients.spawn(async move {
            let mut statuses = Vec::new();
            for round in 0..40 {
                let span = ClientSpan::new(1000 + client * 100 + round);
                let (status, _, _) = infer(&server, &[1.0], &[("traceparent", span.traceparent().as_bytes())]).await;
                statuses.push(status);
            }
            statuses
        });
    }
    let mut answered = 0;
    while let Some(statuses) = clients.join_next().await {
        let statuses = statuses.expect("a client");
        assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
        answered += statuses.len();
    }
    assert_eq!(answered, 640);
    // Then a collector that refuses: its exports fail at once, counted.
    receiver.set(Behaviour::Refuse);
    tokio::time::sleep(Duration::from_millis(600)).await;
    for round in 0..20 {
        let span = ClientSpan::new(5000 + round);
        let (status, _, body) = infer(&server, &[1.0], &[("traceparent", span.traceparent().as_bytes())]).await;
        assert_eq!(status, 200, "{body}");
    }
    tokio::time::sleep(Duration::from_millis(600)).await;
    let metrics = crate::common::metrics::scrape_process(&server).await;
    let value = |outcome: &str| metrics.value("tensorplug_trace_spans_total", &[("outcome", outcome)]);
    let (dropped, failed) = (value("dropped"), value("failed"));
    let waiting = metrics.value("tensorplug_trace_spans_waiting", &[]);
    println!("dropped {dropped}, failed {failed}, waiting {waiting}");
    assert!(
        dropped > 0.0,
        "a silent collector fills the queue: spans dropped and counted"
    );
    assert!(failed > 0.0, "exports that time out or are refused are counted");
    assert!(waiting <= 64.0, "{waiting} spans waiting, over the queue's 64");
    // Memory stays flat: thousands of spans into a collector that never answers cost no
    // more than the bounded queue holds.
    let grew_mib = server.peak_rss_kib().saturating_sub(rss_before) / 1024;
    println!("peak RSS grew {grew_mib} MiB");
    assert!(grew_mib <= 32, "the server's peak RSS grew {grew_mib} MiB");
    assert!(receiver.exports() > 0);
}

/// The clients users have, instrumented with OpenTelemetry's official Python SDK
/// (tests/conformance/traced_clients.py): `requests`, `tritonclient` HTTP and gRPC, the
/// `openai` package and `nats-py`, each call in a span of its own with its context
/// injected. Each call's trace is one tree from that span through the server span to the
/// plugin calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_sdk_s_clients_each_get_one_tree() {
    let python = crate::common::python::python().await;
    let receiver = Receiver::start(Behaviour::Accept).await;
    let broker = crate::common::nats::Broker::start();
    let repository = crate::common::minilm::minilm_repository("minilm", "tract");
    std::os::unix::fs::symlink(
        crate::common::root().join("examples/models/digits"),
        repository.path().join("digits"),
    )
    .expect("link digits");
    let nats = broker.url();
    let server = ServerProcess::spawn_with_env(
        repository.path(),
        &[
            "--grpc-port",
            "0",
            "--nats-url",
            &nats,
            "--otlp-endpoint",
            &receiver.endpoint,
        ],
        &[("OTEL_BSP_SCHEDULE_DELAY", "100")],
    )
    .await;
    let mut clients = std::process::Command::new(&python);
    clients
        .arg(crate::common::root().join("tests/conformance/traced_clients.py"))
        .args(["--http", &server.address.to_string()])
        .args(["--grpc", &server.grpc_address().to_string()])
        .args(["--nats", &nats])
        .env("PYTHONUNBUFFERED", "1")
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("no_proxy", "127.0.0.1,localhost");
    let output = crate::common::python::run_bounded("traced_clients.py", clients, Duration::from_secs(300)).await;
    assert!(output.status.success(), "{}", crate::common::python::shown(&output));
    let calls: Vec<serde_json::Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect();
    let names: Vec<&str> = calls.iter().map(|c| c["client"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "requests",
            "tritonclient.http",
            "tritonclient.grpc",
            "openai",
            "nats-py"
        ]
    );
    for call in &calls {
        let (client, trace_id, span_id) = (
            call["client"].as_str().unwrap(),
            call["trace_id"].as_str().unwrap(),
            call["span_id"].as_str().unwrap(),
        );
        let spans = receiver
            .trace(trace_id, EXPORTED_WITHIN, |spans| {
                spans.iter().any(|s| s.parent_span_id == span_id)
                    && spans.iter().any(|s| s.name == "tensorplug.predict")
            })
            .await;
        let server_span = spans
            .iter()
            .find(|s| s.parent_span_id == span_id)
            .unwrap_or_else(|| panic!("{client}: no server span under the client's span in {spans:#?}"));
        let batch = spans
            .iter()
            .find(|s| s.name == "tensorplug.batch" && s.parent_span_id == server_span.span_id)
            .unwrap_or_else(|| panic!("{client}: no batch under {} in {spans:#?}", server_span.name));
        assert!(
            spans
                .iter()
                .any(|s| s.name == "tensorplug.predict" && s.parent_span_id == batch.span_id),
            "{client}: no plugin call under the batch in {spans:#?}"
        );
        if let Some(answered) = call["answered"].as_str() {
            assert_eq!(
                answered,
                format!("00-{trace_id}-{}-01", server_span.span_id),
                "{client}: the answer names the server span"
            );
        }
        println!("{client}: {} → tensorplug.batch → tensorplug.predict", server_span.name);
    }
}

/// The digits example's three stages, each a span under the batch, in order; the tree
/// printed as docs/operations.md draws it (`--nocapture`; `TENSORPLUG_TEST_BINARY` for a
/// release build's durations).
#[tokio::test]
async fn each_stage_of_a_pipeline_is_a_span_under_the_batch() {
    let receiver = Receiver::start(Behaviour::Accept).await;
    let repository = tempfile::tempdir().expect("a repository");
    std::os::unix::fs::symlink(
        crate::common::root().join("examples/models/digits"),
        repository.path().join("digits"),
    )
    .expect("link digits");
    let server = ServerProcess::spawn_with_env(
        repository.path(),
        &["--otlp-endpoint", &receiver.endpoint],
        &[("OTEL_BSP_SCHEDULE_DELAY", "100")],
    )
    .await;
    let body = std::fs::read_to_string(crate::common::root().join("tests/data/digits/test_requests.jsonl"))
        .expect("digits requests")
        .lines()
        .next()
        .expect("a request")
        .to_owned();
    let mut last = None;
    for n in 0..3 {
        let client = ClientSpan::new(900 + n);
        let response = server
            .client
            .post(server.url("/v2/models/digits/infer"))
            .header("content-type", "application/json")
            .header("traceparent", client.traceparent())
            .body(body.clone())
            .send()
            .await
            .expect("infer");
        assert_eq!(response.status(), 200);
        last = Some(client);
    }
    let client = last.unwrap();
    let stages = ["tensorplug.preprocess", "tensorplug.predict", "tensorplug.postprocess"];
    let spans = receiver
        .trace(&client.trace_id, EXPORTED_WITHIN, |spans| {
            stages.iter().all(|stage| spans.iter().any(|s| s.name == *stage))
        })
        .await;
    let batch = one(&spans, "tensorplug.batch");
    let mut calls: Vec<&Span> = spans.iter().filter(|s| s.parent_span_id == batch.span_id).collect();
    calls.sort_by_key(|s| s.start_ns);
    let names: Vec<&str> = calls.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, stages);
    println!("{}", tree(&spans, &client.span_id, 0));
}

/// `tensorplug infer` with an OTLP endpoint: the run is one trace. Its root span holds a
/// client span per request sent, whose context the request carries: against a server
/// (REST, gRPC), that server's span is the client span's child; in-process, the server span is
/// made in the same process, under the client span. Below each, the batch and its call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tensorplug_infer_run_is_one_trace_down_to_each_plugin_call() {
    let receiver = Receiver::start(Behaviour::Accept).await;
    let (server, repository) = traced_server(&receiver, &["--grpc-port", "0"], QUICK_BATCHES).await;
    let work = tempfile::tempdir().expect("a folder");
    let input = work.path().join("in.jsonl");
    let lines: Vec<String> = (1..=4)
        .map(|k| {
            json!({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 1], "data": [k as f32]}]}).to_string()
        })
        .collect();
    std::fs::write(&input, lines.join("\n") + "\n").expect("the input");
    let url = format!("http://{}", server.address);
    let cache = crate::common::compile_cache();
    let grpc = server.grpc_address().to_string();
    let targets: [(&str, Vec<&str>, &str); 3] = [
        ("rest", vec!["--url", &url], "POST /v2/models/{model}/infer"),
        (
            "grpc",
            vec!["--url", &grpc, "-t", "grpc"],
            "inference.GRPCInferenceService/ModelInfer",
        ),
        (
            "in-process",
            vec![
                "--repository",
                repository.path().to_str().unwrap(),
                "--cache-dir",
                cache.to_str().unwrap(),
            ],
            "tensorplug.infer.in_process",
        ),
    ];
    for (what, target, server_span_name) in targets {
        let output = work.path().join(format!("{what}.jsonl"));
        // One worker: each request alone in its batch holds its plugin call.
        let mut list = crate::batch::args(&[
            "-m",
            "faulty",
            "-w",
            "1",
            "-i",
            input.to_str().unwrap(),
            "-o",
            output.to_str().unwrap(),
        ]);
        list.extend(target.iter().map(|s| (*s).to_owned()));
        list.extend(["--otlp-endpoint".to_owned(), receiver.endpoint.clone()]);
        let mut command = crate::batch::infer_command(&list);
        command.env("OTEL_BSP_SCHEDULE_DELAY", "100");
        let run = tokio::task::spawn_blocking(move || command.output())
            .await
            .expect("join")
            .expect("run tensorplug infer");
        let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
        assert_eq!(run.status.code(), Some(0), "{what}: {stderr}");
        assert_eq!(crate::batch::read_lines(&output).len(), 4, "{what}");
        let trace_id = stderr
            .lines()
            .find_map(|line| line.strip_prefix("tensorplug infer: trace "))
            .unwrap_or_else(|| panic!("{what}: no trace id in {stderr}"))
            .trim()
            .to_owned();
        let spans = receiver
            .trace(&trace_id, EXPORTED_WITHIN, |spans| {
                spans.iter().any(|s| s.name == "tensorplug infer")
                    && spans.iter().filter(|s| s.name == "tensorplug.predict").count() >= 4
            })
            .await;
        let root = one(&spans, "tensorplug infer");
        assert_eq!(root.parent_span_id, "", "{what}: the run is the root");
        assert_eq!(root.attribute("tensorplug.infer.lines"), Some("4"), "{what}");
        let requests = named(&spans, "tensorplug.infer.request");
        assert_eq!(requests.len(), 4, "{what}: a client span per request (one line each)");
        for request in requests {
            assert_eq!(request.parent_span_id, root.span_id, "{what}");
            assert_eq!(request.kind, 3, "{what}: a client span");
            assert_eq!(request.attribute("tensorplug.status"), Some("200"), "{what}");
            let server_span = spans
                .iter()
                .find(|s| s.parent_span_id == request.span_id)
                .unwrap_or_else(|| panic!("{what}: no server span under a request in {spans:#?}"));
            assert_eq!(server_span.name, server_span_name, "{what}");
            let batch = spans
                .iter()
                .find(|s| s.name == "tensorplug.batch" && s.parent_span_id == server_span.span_id)
                .unwrap_or_else(|| panic!("{what}: no batch under the server span"));
            assert!(
                spans.iter().any(|s| s.parent_span_id == batch.span_id),
                "{what}: no call under the batch"
            );
        }
    }
}

/// `--otlp-protocol grpc`: the same spans, exported over OTLP's gRPC service.
#[tokio::test]
async fn spans_go_over_otlp_s_grpc_service_too() {
    let receiver = Receiver::start_grpc().await;
    let (server, _repository) = traced_server(&receiver, &["--otlp-protocol", "grpc"], QUICK_BATCHES).await;
    let client = ClientSpan::new(77);
    let (status, _, body) = infer(&server, &[1.0], &[("traceparent", client.traceparent().as_bytes())]).await;
    assert_eq!(status, 200, "{body}");
    let spans = receiver.trace(&client.trace_id, EXPORTED_WITHIN, whole).await;
    let server_span = one(&spans, "POST /v2/models/{model}/infer");
    assert_eq!(server_span.parent_span_id, client.span_id);
    assert_eq!(one(&spans, "tensorplug.batch").parent_span_id, server_span.span_id);
}
