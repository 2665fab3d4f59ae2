//! The queue edge against a real broker (Debian's nats-server with JetStream, started by
//! each test on a free port): answers byte for byte REST's, hostile messages answered and
//! never delivered again, nothing lost when the broker restarts or a replica is killed or
//! drained mid-batch, a message nobody answers answered after its last delivery, a full
//! queue handing messages back, and a backlog that stays in the stream.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use async_nats::HeaderMap;
use serde_json::{json, Value};
use tokio_stream::StreamExt;

use crate::common::metrics::scrape_process;
use crate::common::nats::{answers, connect, consumer_info, publish, stream_messages, tally, Broker};
use crate::common::process::ServerProcess;
use crate::common::{faulty_config, items_request, root};

/// A repository of the digits example (linked) and the faulty test model under `faulty`.
fn repository(faulty: &str) -> tempfile::TempDir {
    let repository = crate::common::faulty_repository(faulty);
    std::os::unix::fs::symlink(
        root().join("examples/models/digits"),
        repository.path().join("digits"),
    )
    .expect("link digits");
    repository
}

/// A replica consuming from `broker`, ready (its models loaded, the broker connected).
async fn replica(repository: &Path, broker: &Broker, extra: &[&str]) -> ServerProcess {
    let url = broker.url();
    let mut args = vec!["--nats-url", url.as_str()];
    args.extend_from_slice(extra);
    ServerProcess::spawn(repository, &args).await
}

fn header(id: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert("Nats-Msg-Id", id);
    headers
}

/// Answers arriving on a core subscription, by the last token of their subject.
async fn inbox(client: &async_nats::Client, prefix: &str) -> tokio::sync::mpsc::UnboundedReceiver<(String, u16, Vec<u8>, HeaderMap)> {
    let mut subscriber = client.subscribe(format!("{prefix}.>")).await.expect("subscribe");
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(message) = subscriber.next().await {
            let headers = message.headers.clone().unwrap_or_default();
            let status = headers
                .get("Tensorplug-Status")
                .and_then(|s| s.as_str().parse().ok())
                .expect("an answer has a status");
            let key = message.subject.rsplit('.').next().unwrap_or_default().to_owned();
            if tx.send((key, status, message.payload.to_vec(), headers)).is_err() {
                break;
            }
        }
    });
    rx
}

async fn receive_all(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<(String, u16, Vec<u8>, HeaderMap)>,
    count: usize,
    within: Duration,
) -> HashMap<String, (u16, Vec<u8>, HeaderMap)> {
    let mut got = HashMap::new();
    let started = Instant::now();
    while got.len() < count {
        let left = within.saturating_sub(started.elapsed());
        match tokio::time::timeout(left, rx.recv()).await {
            Ok(Some((key, status, body, headers))) => {
                got.insert(key, (status, body, headers));
            }
            _ => break,
        }
    }
    got
}

async fn rest(server: &ServerProcess, path: &str, body: &[u8], json_header_len: Option<usize>) -> (u16, Vec<u8>) {
    let mut post = server.client.post(server.url(path)).body(body.to_vec());
    if let Some(len) = json_header_len {
        post = post.header("Inference-Header-Content-Length", len);
    }
    let response = post.send().await.expect("REST");
    let status = response.status().as_u16();
    (status, response.bytes().await.expect("body").to_vec())
}

fn digits_lines(count: usize) -> Vec<Value> {
    std::fs::read_to_string(root().join("tests/data/digits/test_requests.jsonl"))
        .expect("digits requests")
        .lines()
        .take(count)
        .map(|line| serde_json::from_str(line).expect("a request"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_answers_are_rest_answers_byte_for_byte() {
    let broker = Broker::start();
    let repository = repository(&faulty_config("max_batch_size = 8", ""));
    let server = replica(repository.path(), &broker, &[]).await;
    let (client, context) = connect(&broker).await;
    let mut rx = inbox(&client, "_INBOX.parity").await;

    // (subject, REST path, body, binary JSON length)
    let mut cases: Vec<(String, String, Vec<u8>, Option<usize>)> = Vec::new();
    for line in digits_lines(25) {
        cases.push((
            "tensorplug.infer.digits".into(),
            "/v2/models/digits/infer".into(),
            serde_json::to_vec(&line).unwrap(),
            None,
        ));
    }
    // Several items in one request, one of them failing: REST's 207 body.
    let mut mixed = items_request(&[1.0, -5.0, 3.0]);
    mixed["id"] = json!("mixed");
    cases.push((
        "tensorplug.infer.faulty.1".into(),
        "/v2/models/faulty/versions/1/infer".into(),
        serde_json::to_vec(&mixed).unwrap(),
        None,
    ));
    // Outputs asked for as binary tensor data: the same bytes and the same JSON length.
    let mut binary = items_request(&[1.5, 2.5]);
    binary["parameters"] = json!({"binary_data_output": true});
    cases.push((
        "tensorplug.infer.faulty".into(),
        "/v2/models/faulty/infer".into(),
        serde_json::to_vec(&binary).unwrap(),
        None,
    ));
    // Inputs sent as binary tensor data.
    let head = br#"{"inputs":[{"name":"x","datatype":"FP32","shape":[2,1],"parameters":{"binary_data_size":8}}]}"#;
    let mut body = head.to_vec();
    body.extend_from_slice(&1.0f32.to_le_bytes());
    body.extend_from_slice(&4.0f32.to_le_bytes());
    cases.push((
        "tensorplug.infer.faulty".into(),
        "/v2/models/faulty/infer".into(),
        body,
        Some(head.len()),
    ));
    // Failures as a whole: REST's error bodies.
    cases.push((
        "tensorplug.infer.faulty.7".into(),
        "/v2/models/faulty/versions/7/infer".into(),
        serde_json::to_vec(&items_request(&[1.0])).unwrap(),
        None,
    ));
    cases.push((
        "tensorplug.infer.digits".into(),
        "/v2/models/digits/infer".into(),
        br#"{"inputs": [{"name": "pixels""#.to_vec(),
        None,
    ));
    cases.push((
        "tensorplug.infer.faulty".into(),
        "/v2/models/faulty/infer".into(),
        serde_json::to_vec(&items_request(&[-5.0])).unwrap(),
        None,
    ));

    for (i, (subject, _, body, json_len)) in cases.iter().enumerate() {
        let mut headers = HeaderMap::new();
        headers.insert("Tensorplug-Reply-To", format!("_INBOX.parity.{i}").as_str());
        if let Some(len) = json_len {
            headers.insert("Inference-Header-Content-Length", len.to_string().as_str());
        }
        publish(&context, subject, headers, body.clone()).await;
    }
    let got = receive_all(&mut rx, cases.len(), Duration::from_secs(30)).await;
    assert_eq!(got.len(), cases.len(), "every request answered");
    let mut statuses = Vec::new();
    for (i, (_, path, body, json_len)) in cases.iter().enumerate() {
        let (status, answer, headers) = &got[&i.to_string()];
        let (rest_status, rest_body) = rest(&server, path, body, *json_len).await;
        assert_eq!(*status, rest_status, "case {i}: status");
        assert_eq!(
            String::from_utf8_lossy(answer),
            String::from_utf8_lossy(&rest_body),
            "case {i}: the body REST answers"
        );
        if *status == 200 {
            assert_eq!(headers.get("Tensorplug-Model-Version").map(|v| v.as_str()), Some("1"));
        }
        statuses.push(*status);
    }
    assert_eq!(&statuses[25..], &[207, 200, 200, 404, 400, 422], "{statuses:?}");
    assert!(statuses[..25].iter().all(|&s| s == 200));
    let binary_answer = &got["26"].2;
    assert!(binary_answer.get("Inference-Header-Content-Length").is_some());
    // The id the body gives names the answer.
    assert_eq!(
        got["25"].2.get("Tensorplug-Request-Id").map(|v| v.as_str()),
        Some("mixed")
    );

    // Without a reply subject, the answer goes to tensorplug.answers.<model> (kept by the
    // answer stream), under the request's Nats-Msg-Id.
    let line = serde_json::to_vec(&digits_lines(1)[0]).unwrap();
    let mut no_id: Value = serde_json::from_slice(&line).unwrap();
    no_id.as_object_mut().unwrap().remove("id");
    publish(&context, "tensorplug.infer.digits", header("plain-1"), serde_json::to_vec(&no_id).unwrap()).await;
    let kept = answers(&context, "tensorplug.answers.digits", &["plain-1".into()], Duration::from_secs(20)).await;
    let (rest_status, rest_body) = rest(&server, "/v2/models/digits/infer", &serde_json::to_vec(&no_id).unwrap(), None).await;
    assert_eq!(kept["plain-1"][0].status, rest_status);
    assert_eq!(kept["plain-1"][0].body, rest_body);

    // Counted like REST and gRPC, by the edge.
    let metrics = scrape_process(&server).await;
    let counted = metrics.value(
        "tensorplug_requests_total",
        &[("model", "digits"), ("protocol", "nats"), ("status", "200")],
    );
    assert!(counted >= 26.0, "{counted}");
    assert_eq!(metrics.value("tensorplug_nats_connected", &[]), 1.0);
    let info = consumer_info(&context).await;
    assert_eq!((info.num_ack_pending, info.num_redelivered), (0, 0));
    assert_eq!(stream_messages(&context).await, 0, "every request acknowledged or terminated");
}
