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
use crate::common::nats::{
    answers, connect, consumer_info, publish, stream_messages, stream_messages_settled, tally, Broker,
};
use crate::common::process::ServerProcess;
use crate::common::{faulty_config, items_request, root};

/// How long the broker may take to remove a request whose answer was already heard.
const SETTLE: Duration = Duration::from_secs(5);

/// A repository of the digits example (linked) and the faulty test model under `faulty`.
fn repository(faulty: &str) -> tempfile::TempDir {
    let repository = crate::common::faulty_repository(faulty);
    std::os::unix::fs::symlink(root().join("examples/models/digits"), repository.path().join("digits"))
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
async fn inbox(
    client: &async_nats::Client,
    prefix: &str,
) -> tokio::sync::mpsc::UnboundedReceiver<(String, u16, Vec<u8>, HeaderMap)> {
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
    publish(
        &context,
        "tensorplug.infer.digits",
        header("plain-1"),
        serde_json::to_vec(&no_id).unwrap(),
    )
    .await;
    let kept = answers(
        &context,
        "tensorplug.answers.digits",
        &["plain-1".into()],
        Duration::from_secs(20),
    )
    .await;
    let (rest_status, rest_body) = rest(
        &server,
        "/v2/models/digits/infer",
        &serde_json::to_vec(&no_id).unwrap(),
        None,
    )
    .await;
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
    assert_eq!(
        stream_messages_settled(&context, SETTLE).await,
        0,
        "every request acknowledged or terminated"
    );
}

/// The faulty model as the fault tests serve it: batches wait up to 20 ms to fill, so a
/// replica always holds messages mid-batch.
fn slowish() -> String {
    faulty_config("max_batch_size = 16\nmax_queue_delay_us = 20000", "")
}

/// Flags of a replica in the fault tests: a short ack wait, so that what a dead replica
/// held is delivered again within the test's time.
const FAULT_FLAGS: &[&str] = &["--nats-ack-wait-ms", "1500", "--nats-pull-batch", "32"];

/// Publishes `count` requests for the faulty model (`x = i`, id `<tag>-<i>`), one every
/// `pace`, from a task; resolves to their ids once every one is kept by the stream.
fn produce(
    context: async_nats::jetstream::Context,
    tag: &str,
    count: usize,
    pace: Duration,
) -> tokio::task::JoinHandle<Vec<String>> {
    let tag = tag.to_owned();
    tokio::spawn(async move {
        let mut ids = Vec::with_capacity(count);
        for i in 0..count {
            let id = format!("{tag}-{i}");
            let mut request = items_request(&[i as f32]);
            request["id"] = json!(id);
            publish(
                &context,
                "tensorplug.infer.faulty",
                header(&id),
                serde_json::to_vec(&request).unwrap(),
            )
            .await;
            ids.push(id);
            tokio::time::sleep(pace).await;
        }
        ids
    })
}

/// Checks the answer of every one of `ids` is the right one: `y = 2 x` for request
/// `<tag>-<i>`.
fn assert_correct(ids: &[String], answers: &HashMap<String, Vec<crate::common::nats::Answer>>) {
    for id in ids {
        let all = &answers[id];
        let i: f32 = id.rsplit('-').next().unwrap().parse().unwrap();
        let body: Value = serde_json::from_slice(&all[0].body).unwrap();
        assert_eq!(all[0].status, 200, "{id}: {body}");
        assert_eq!(body["id"], json!(id));
        assert_eq!(body["outputs"][0]["data"], json!([2.0 * i]), "{id}");
    }
}

const FAULT_REQUESTS: usize = 600;

/// Waits for the answers of the fault tests' `ids`: every one answered, none lost, each the
/// right answer (repeated ones equal to the first); what was counted, printed.
async fn every_answered(
    context: &async_nats::jetstream::Context,
    ids: &[String],
    fault: &str,
) -> crate::common::nats::Tally {
    let kept = answers(context, "tensorplug.answers.faulty", ids, Duration::from_secs(60)).await;
    let counted = tally(ids, &kept);
    eprintln!("{fault}: {counted:?}");
    assert_eq!(
        (counted.sent, counted.answered, counted.lost),
        (FAULT_REQUESTS, FAULT_REQUESTS, 0),
        "{fault}"
    );
    assert_correct(ids, &kept);
    counted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_lost_when_the_broker_restarts() {
    let mut broker = Broker::start();
    let repository = repository(&slowish());
    let server = replica(repository.path(), &broker, FAULT_FLAGS).await;
    let (_client, context) = connect(&broker).await;
    let producer = produce(context.clone(), "restart", FAULT_REQUESTS, Duration::from_millis(2));
    tokio::time::sleep(Duration::from_millis(500)).await;
    broker.kill();
    // Readiness follows the broker connection (--nats-readiness required, the default).
    let started = Instant::now();
    loop {
        let ready = server
            .client
            .get(server.url("/v2/health/ready"))
            .send()
            .await
            .unwrap()
            .status();
        if ready == 503 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "still ready without the broker"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    broker.restart();
    let ids = producer.await.unwrap();
    every_answered(&context, &ids, "broker restart").await;
    let ready = server
        .client
        .get(server.url("/v2/health/ready"))
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(ready, 200, "ready again with the broker back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_lost_when_a_replica_is_killed_mid_batch() {
    let broker = Broker::start();
    let repository = repository(&slowish());
    let doomed = replica(repository.path(), &broker, FAULT_FLAGS).await;
    let survivor = replica(repository.path(), &broker, FAULT_FLAGS).await;
    let (_client, context) = connect(&broker).await;
    let producer = produce(context.clone(), "kill", FAULT_REQUESTS, Duration::from_millis(2));
    // Mid-stream, while it holds messages in a batch: SIGKILL (drop kills).
    let started = Instant::now();
    loop {
        let metrics = scrape_process(&doomed).await;
        if metrics.value("tensorplug_nats_in_flight_messages", &[]) > 0.0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the replica never held a message"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    drop(doomed);
    let ids = producer.await.unwrap();
    every_answered(&context, &ids, "replica killed").await;
    let metrics = scrape_process(&survivor).await;
    eprintln!(
        "survivor: redeliveries {}",
        metrics.value("tensorplug_nats_redeliveries_total", &[])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_lost_when_a_replica_drains_on_sigterm() {
    let broker = Broker::start();
    let repository = repository(&slowish());
    let mut drained = replica(repository.path(), &broker, FAULT_FLAGS).await;
    let _other = replica(repository.path(), &broker, FAULT_FLAGS).await;
    let (_client, context) = connect(&broker).await;
    let producer = produce(context.clone(), "drain", FAULT_REQUESTS, Duration::from_millis(2));
    tokio::time::sleep(Duration::from_millis(400)).await;
    drained.terminate();
    let exit = drained
        .wait_exit(Duration::from_secs(30))
        .await
        .expect("drained and exited");
    assert!(exit.success(), "{exit:?}");
    assert!(
        drained.log().iter().any(|l| l.contains("stopped consuming from NATS")),
        "{:?}",
        drained.log()
    );
    let ids = producer.await.unwrap();
    let counted = every_answered(&context, &ids, "replica drained").await;
    assert_eq!(counted.duplicated, 0, "a drained replica answers what it holds once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_messages_are_answered_as_rest_answers_them_and_never_delivered_again() {
    let broker = Broker::start();
    let repository = repository(&faulty_config("max_batch_size = 8", ""));
    let limit = 64 * 1024;
    let server = replica(repository.path(), &broker, &["--max-body-bytes", &limit.to_string()]).await;
    let (client, context) = connect(&broker).await;
    let mut rx = inbox(&client, "_INBOX.hostile").await;
    let huge = {
        let mut request = items_request(&vec![1.0; 40_000]);
        request["id"] = json!("huge");
        serde_json::to_vec(&request).unwrap()
    };
    // (subject, body, extra headers, the REST path to compare with, the status)
    type Case<'a> = (&'a str, Vec<u8>, Vec<(&'a str, &'a str)>, &'a str, u16);
    let cases: Vec<Case> = vec![
        (
            "tensorplug.infer.faulty",
            b"{not json".to_vec(),
            vec![],
            "/v2/models/faulty/infer",
            400,
        ),
        (
            "tensorplug.infer.faulty",
            huge.clone(),
            vec![],
            // REST answers this one while the client still sends (a reset may beat the
            // answer): compared with REST's wording below instead.
            "",
            413,
        ),
        (
            "tensorplug.infer.nosuch",
            b"{}".to_vec(),
            vec![],
            "/v2/models/nosuch/infer",
            404,
        ),
        (
            "tensorplug.infer.faulty",
            vec![],
            vec![],
            "/v2/models/faulty/infer",
            400,
        ),
        (
            "tensorplug.infer.faulty",
            b"{\"inputs\":[]}".to_vec(),
            vec![("Inference-Header-Content-Length", "999999")],
            "",
            400,
        ),
        (
            "tensorplug.infer.faulty",
            b"{}".to_vec(),
            vec![("Inference-Header-Content-Length", "twelve")],
            "",
            400,
        ),
        (
            "tensorplug.infer.faulty",
            vec![0xff, 0xfe, 0x00],
            vec![],
            "/v2/models/faulty/infer",
            400,
        ),
    ];
    for (i, (subject, body, extra, _, _)) in cases.iter().enumerate() {
        let mut headers = HeaderMap::new();
        headers.insert("Tensorplug-Reply-To", format!("_INBOX.hostile.{i}").as_str());
        for (name, value) in extra {
            headers.insert(*name, *value);
        }
        publish(&context, subject, headers, body.clone()).await;
    }
    let got = receive_all(&mut rx, cases.len(), Duration::from_secs(20)).await;
    for (i, (_, body, _, path, status)) in cases.iter().enumerate() {
        let (answered, answer, _) = got.get(&i.to_string()).unwrap_or_else(|| panic!("case {i} unanswered"));
        assert_eq!(answered, status, "case {i}: {}", String::from_utf8_lossy(answer));
        let error: Value = serde_json::from_slice(answer).expect("a JSON error body");
        assert!(error["error"].is_string(), "{error}");
        if !path.is_empty() {
            let (rest_status, rest_body) = rest(&server, path, body, None).await;
            assert_eq!(
                (*answered, answer),
                (rest_status, &rest_body),
                "case {i}: as REST answers"
            );
        }
    }
    assert_eq!(
        String::from_utf8_lossy(&got["1"].1),
        format!(r#"{{"error":"request body is larger than the limit of {limit} bytes"}}"#)
    );
    // A reply subject that cannot be published to: answered on the default subject.
    let mut headers = header("bad-reply");
    headers.insert("Tensorplug-Reply-To", "a.*.b");
    publish(
        &context,
        "tensorplug.infer.faulty",
        headers,
        serde_json::to_vec(&items_request(&[1.0])).unwrap(),
    )
    .await;
    let kept = answers(
        &context,
        "tensorplug.answers.faulty",
        &["bad-reply".into()],
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(kept["bad-reply"][0].status, 400);
    assert!(String::from_utf8_lossy(&kept["bad-reply"][0].body).contains("Tensorplug-Reply-To"));

    // A flood of them: answered and terminated, none delivered again, memory bounded.
    let before = server.rss_kib();
    let flood = 1500;
    let mut acks = Vec::with_capacity(flood);
    for i in 0..flood {
        let (subject, body) = match i % 3 {
            0 => ("tensorplug.infer.faulty", huge.clone()),
            1 => ("tensorplug.infer.faulty", b"{\"inputs\": [".to_vec()),
            _ => ("tensorplug.infer.nosuch", b"{}".to_vec()),
        };
        acks.push(
            context
                .publish_with_headers(subject, header(&format!("flood-{i}")), body.into())
                .await
                .expect("publish"),
        );
    }
    for ack in acks {
        ack.await.expect("kept");
    }
    let started = Instant::now();
    let mut peak = before;
    while stream_messages(&context).await > 0 {
        peak = peak.max(server.rss_kib());
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the flood was not worked off"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    peak = peak.max(server.rss_kib());
    let info = consumer_info(&context).await;
    let metrics = scrape_process(&server).await;
    let terminated = metrics.value("tensorplug_nats_messages_total", &[("outcome", "terminated")]);
    eprintln!(
        "hostile flood: {flood} messages ({} MB), RSS {before} -> peak {peak} KiB, terminated {terminated}, redelivered {}",
        flood / 3 * huge.len() / 1_000_000,
        info.num_redelivered
    );
    assert_eq!((info.num_ack_pending, info.num_redelivered), (0, 0));
    assert_eq!(metrics.value_or_zero("tensorplug_nats_redeliveries_total", &[]), 0.0);
    assert!(terminated >= flood as f64, "{terminated}");
    assert!(
        peak - before < 64 * 1024,
        "RSS grew {} KiB under the flood",
        peak - before
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_no_replica_answers_is_answered_after_its_last_delivery() {
    use async_nats::jetstream::consumer;
    let broker = Broker::start();
    let repository = repository(&faulty_config("max_batch_size = 8", ""));
    let (_client, context) = connect(&broker).await;
    // The consumer as the server makes it, with two deliveries of three seconds each.
    let flags = ["--nats-ack-wait-ms", "3000", "--nats-max-deliver", "2"];
    let stream = context
        .get_or_create_stream(async_nats::jetstream::stream::Config {
            name: "TENSORPLUG_INFER".into(),
            subjects: vec!["tensorplug.infer.>".into()],
            retention: async_nats::jetstream::stream::RetentionPolicy::WorkQueue,
            storage: async_nats::jetstream::stream::StorageType::File,
            ..Default::default()
        })
        .await
        .unwrap();
    let rogue: consumer::PullConsumer = stream
        .create_consumer(consumer::pull::Config {
            durable_name: Some("tensorplug".into()),
            ack_policy: consumer::AckPolicy::Explicit,
            ack_wait: Duration::from_secs(3),
            max_deliver: 2,
            filter_subject: "tensorplug.infer.>".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut request = items_request(&[1.0]);
    request["id"] = json!("doomed");
    publish(
        &context,
        "tensorplug.infer.faulty",
        header("m-1"),
        serde_json::to_vec(&request).unwrap(),
    )
    .await;
    // A replica that takes the message and dies before answering, twice: its every delivery.
    for delivery in 1..=2 {
        let mut batch = rogue
            .batch()
            .max_messages(1)
            .expires(Duration::from_secs(5))
            .messages()
            .await
            .unwrap();
        let message = batch.next().await.expect("delivered").unwrap();
        assert_eq!(message.info().unwrap().delivered, delivery);
    }
    // Now a real replica, which hears the broker give the message up.
    let server = replica(repository.path(), &broker, &flags).await;
    let kept = answers(
        &context,
        "tensorplug.answers.faulty",
        &["doomed".into()],
        Duration::from_secs(20),
    )
    .await;
    let answer = &kept
        .get("doomed")
        .unwrap_or_else(|| panic!("no answer: {:#?}", server.log()))[0];
    let text = String::from_utf8_lossy(&answer.body);
    assert_eq!(answer.status, 500, "{text}");
    assert!(text.contains("not answered after 2 deliveries"), "{text}");
    assert_eq!(
        stream_messages_settled(&context, SETTLE).await,
        0,
        "removed from the stream"
    );
    // Counted once the broker has deleted the message, which the stream showed first.
    let mut given_up = 0.0;
    for _ in 0..100 {
        let metrics = scrape_process(&server).await;
        given_up = metrics.value("tensorplug_nats_messages_total", &[("outcome", "given_up")]);
        if given_up == 1.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(given_up, 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_hands_messages_back_until_there_is_room() {
    let broker = Broker::start();
    // One instance, one item at a time, a queue of one: the rest is refused 503.
    let repository = repository(&faulty_config(
        "max_batch_size = 1\nmax_queue_size = 1",
        "instances = 1",
    ));
    let server = replica(
        repository.path(),
        &broker,
        &["--nats-nak-delay-ms", "200", "--nats-max-deliver", "100"],
    )
    .await;
    let (_client, context) = connect(&broker).await;
    // -9 sleeps three seconds in the instance: everything behind it finds the queue full.
    let mut sleeper = items_request(&[-9.0]);
    sleeper["id"] = json!("sleeper");
    publish(
        &context,
        "tensorplug.infer.faulty",
        header("sleeper"),
        serde_json::to_vec(&sleeper).unwrap(),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let ids = produce(context.clone(), "full", 20, Duration::ZERO).await.unwrap();
    let kept = answers(&context, "tensorplug.answers.faulty", &ids, Duration::from_secs(60)).await;
    let counted = tally(&ids, &kept);
    assert_eq!(
        (counted.answered, counted.lost),
        (20, 0),
        "{counted:?} {:#?}",
        server.log()
    );
    assert_correct(&ids, &kept);
    let metrics = scrape_process(&server).await;
    let retried = metrics.value("tensorplug_nats_messages_total", &[("outcome", "retried")]);
    eprintln!("full queue: 20 answered 200 after {retried} hand-backs");
    assert!(retried > 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_of_100k_requests_stays_in_the_stream_not_in_memory() {
    let broker = Broker::start();
    // Slow: a batch waits 50 ms for 8 items, and the replica holds 4 at once.
    let repository = repository(&faulty_config(
        "max_batch_size = 8\nmax_queue_delay_us = 50000",
        "instances = 1",
    ));
    let server = replica(repository.path(), &broker, &["--nats-pull-batch", "4"]).await;
    let (_client, context) = connect(&broker).await;
    let backlog = 100_000;
    let body = serde_json::to_vec(&items_request(&[1.0])).unwrap();
    let before = server.rss_kib();
    let started = Instant::now();
    for chunk in 0..backlog / 1000 {
        let mut acks = Vec::with_capacity(1000);
        for i in 0..1000 {
            acks.push(
                context
                    .publish_with_headers(
                        "tensorplug.infer.faulty",
                        header(&format!("b-{}", chunk * 1000 + i)),
                        body.clone().into(),
                    )
                    .await
                    .expect("publish"),
            );
        }
        for ack in acks {
            ack.await.expect("kept");
        }
    }
    let published = started.elapsed();
    let mut samples = Vec::new();
    let mut peak_in_flight = 0.0f64;
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        samples.push(server.rss_kib());
        let metrics = scrape_process(&server).await;
        peak_in_flight = peak_in_flight.max(metrics.value("tensorplug_nats_in_flight_messages", &[]));
    }
    let info = consumer_info(&context).await;
    let peak = samples.iter().copied().max().unwrap_or(before);
    eprintln!(
        "backlog: {backlog} published in {published:?}; RSS {before} KiB before, peak {peak} KiB over 5 s; \
         in flight at most {peak_in_flight}; still pending {} (acked so far {})",
        info.num_pending, info.ack_floor.stream_sequence
    );
    assert!(peak_in_flight <= 4.0, "{peak_in_flight}");
    assert!(
        info.num_pending > 90_000,
        "the backlog stays in the stream: {}",
        info.num_pending
    );
    assert!(info.num_ack_pending <= 4, "{}", info.num_ack_pending);
    assert!(
        peak - before < 32 * 1024,
        "RSS grew {} KiB with 100k requests queued",
        peak - before
    );
}

/// docs/api.md's Python example (examples/clients/nats_infer.py, nats-py) as printed: its
/// answer is REST's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_example_gets_rest_s_answer() {
    let python = crate::common::python::python().await;
    let broker = Broker::start();
    let server = replica(&crate::common::examples(), &broker, &[]).await;
    let request = root().join("examples/digits/request.json");
    let mut command = std::process::Command::new(python);
    command
        .arg(root().join("examples/clients/nats_infer.py"))
        .arg(broker.url())
        .arg("digits")
        .arg(&request);
    let output = crate::common::python::run_bounded("nats_infer.py", command, Duration::from_secs(60)).await;
    assert!(output.status.success(), "{}", crate::common::python::shown(&output));
    let printed = String::from_utf8_lossy(&output.stdout);
    let (rest_status, rest_body) = rest(
        &server,
        "/v2/models/digits/infer",
        &std::fs::read(&request).unwrap(),
        None,
    )
    .await;
    assert_eq!(
        printed.trim_end(),
        format!("{rest_status} {}", String::from_utf8_lossy(&rest_body))
    );
    assert!(printed.contains(r#""data":[2]"#), "{printed}");
}

/// Reply subjects that would have the server command the broker, or answer into the
/// request stream, are refused (answered 400 on the default subject); an id of any length
/// is cut in the headers; an answer larger than the broker takes is answered 500 at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_request_asks_of_its_answer_cannot_turn_the_server_against_the_broker() {
    let broker = Broker::start();
    // The faulty model's -51: a 16 MiB row, past the broker's 8 MB max_payload.
    let toml = faulty_config("max_batch_size = 8", "").replace(
        "[[outputs]]\nname = \"y\"\ndatatype = \"FP32\"\nshape = [1]",
        "[[outputs]]\nname = \"y\"\ndatatype = \"FP32\"\nshape = [-1]",
    );
    let repository = repository(&toml);
    let server = replica(repository.path(), &broker, &[]).await;
    let (_client, context) = connect(&broker).await;
    let one = serde_json::to_vec(&items_request(&[1.0])).unwrap();
    for (id, reply_to) in [
        ("js-api", "$JS.API.STREAM.DELETE.TENSORPLUG_INFER"),
        ("sys", "$SYS.REQ.SERVER.PING"),
        ("loop", "tensorplug.infer.faulty"),
    ] {
        let mut headers = header(id);
        headers.insert("Tensorplug-Reply-To", reply_to);
        publish(&context, "tensorplug.infer.faulty", headers, one.clone()).await;
    }
    // An id past REST's limit in the body is REST's 400; one of any length in Nats-Msg-Id
    // is cut to 1 KiB in the answer's headers.
    let mut request = items_request(&[1.0]);
    request["id"] = json!("i".repeat(100_000));
    publish(
        &context,
        "tensorplug.infer.faulty",
        header("long-body-id"),
        serde_json::to_vec(&request).unwrap(),
    )
    .await;
    publish(
        &context,
        "tensorplug.infer.faulty",
        header(&"h".repeat(5000)),
        one.clone(),
    )
    .await;
    publish(
        &context,
        "tensorplug.infer.faulty",
        header("too-large"),
        serde_json::to_vec(&items_request(&[-51.0])).unwrap(),
    )
    .await;
    let clipped = "h".repeat(1024);
    let ids: Vec<String> = ["js-api", "sys", "loop", "long-body-id", clipped.as_str(), "too-large"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let kept = answers(&context, "tensorplug.answers.faulty", &ids, Duration::from_secs(30)).await;
    for id in &ids[..3] {
        let answer = &kept.get(id).unwrap_or_else(|| panic!("{id} unanswered"))[0];
        let text = String::from_utf8_lossy(&answer.body);
        assert_eq!(answer.status, 400, "{id}: {text}");
        assert!(text.contains("not a subject to answer on"), "{text}");
    }
    let (rest_status, rest_body) = rest(
        &server,
        "/v2/models/faulty/infer",
        &serde_json::to_vec(&request).unwrap(),
        None,
    )
    .await;
    assert_eq!(
        (kept["long-body-id"][0].status, &kept["long-body-id"][0].body),
        (rest_status, &rest_body)
    );
    assert_eq!(kept[&clipped][0].status, 200);
    let too_large = &kept.get("too-large").unwrap_or_else(|| panic!("{:#?}", server.log()))[0];
    let text = String::from_utf8_lossy(&too_large.body);
    assert_eq!(too_large.status, 500, "{text}");
    assert!(text.contains("max_payload"), "{text}");
    // The stream the reply subject tried to delete is there, empty, and nothing is left
    // to be delivered again.
    assert_eq!(stream_messages_settled(&context, SETTLE).await, 0);
    let info = consumer_info(&context).await;
    assert_eq!((info.num_ack_pending, info.num_redelivered), (0, 0));
    drop(server);
}

/// With tracing on, a published request's W3C context (its message headers, carried
/// through JetStream) is continued: the server's `process` span is the publisher's span's
/// child, its batch and plugin call below it, and the answer's headers name that span.
/// Hostile trace headers are ignored: the request is answered as without them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_published_requests_trace_is_continued_and_its_answer_names_the_server_span() {
    use crate::common::otlp::{Behaviour, Receiver};
    let broker = Broker::start();
    let receiver = Receiver::start(Behaviour::Accept).await;
    let repository = repository(&faulty_config("max_batch_size = 8", ""));
    let url = broker.url();
    let _server = ServerProcess::spawn_with_env(
        repository.path(),
        &["--nats-url", &url, "--otlp-endpoint", &receiver.endpoint],
        &[("OTEL_BSP_SCHEDULE_DELAY", "100")],
    )
    .await;
    let (client, context) = connect(&broker).await;
    let mut rx = inbox(&client, "_INBOX.traced").await;
    let (trace_id, publisher_span) = ("5b8aa5a2d2c872e8321cf37308d69df2", "051581bf3cb55c13");
    let traceparent = format!("00-{trace_id}-{publisher_span}-01");
    // 10,000 members: 40 KB, within the broker's 64 KB of headers.
    let hostile_state = "k=v,".repeat(10_000);
    let cases: [&[(&str, &str)]; 3] = [
        &[("traceparent", &traceparent), ("tracestate", "vendor=1")],
        &[("traceparent", "00-not-a-context-01")],
        &[("traceparent", &traceparent), ("tracestate", &hostile_state)],
    ];
    // One at a time: each request alone in its batch holds its plugin call.
    let mut got = HashMap::new();
    for (i, trace_headers) in cases.iter().enumerate() {
        let mut headers = HeaderMap::new();
        headers.insert("Tensorplug-Reply-To", format!("_INBOX.traced.{i}").as_str());
        for (name, value) in *trace_headers {
            headers.insert(*name, *value);
        }
        let body = serde_json::to_vec(&items_request(&[2.0])).unwrap();
        publish(&context, "tensorplug.infer.faulty", headers, body).await;
        got.extend(receive_all(&mut rx, 1, Duration::from_secs(30)).await);
    }
    for i in 0..cases.len() {
        let (status, body, headers) = &got[&i.to_string()];
        assert_eq!(*status, 200, "case {i}: {}", String::from_utf8_lossy(body));
        let answered = headers.get("traceparent").map(|v| v.as_str().to_owned());
        assert_eq!(answered.as_deref().map(str::len), Some(55), "case {i}: {answered:?}");
    }
    let (_, _, headers) = &got["0"];
    let server_span_id = headers
        .get("traceparent")
        .unwrap()
        .as_str()
        .split('-')
        .nth(2)
        .unwrap()
        .to_owned();
    let spans = receiver
        .trace(trace_id, Duration::from_secs(20), |spans| {
            spans
                .iter()
                .any(|s| s.name == "tensorplug.predict" && !s.parent_span_id.is_empty())
                && spans.iter().any(|s| s.name.starts_with("process "))
        })
        .await;
    let process = spans
        .iter()
        .find(|s| s.span_id == server_span_id)
        .unwrap_or_else(|| panic!("no server span {server_span_id} in {spans:#?}"));
    assert_eq!(process.parent_span_id, publisher_span);
    assert_eq!(process.kind, 5, "a consumer span");
    assert_eq!(process.attribute("messaging.system"), Some("nats"));
    assert_eq!(process.attribute("tensorplug.status"), Some("200"));
    let batch = spans
        .iter()
        .find(|s| s.name == "tensorplug.batch" && s.parent_span_id == process.span_id)
        .expect("the batch under the server span");
    assert!(spans
        .iter()
        .any(|s| s.name == "tensorplug.predict" && s.parent_span_id == batch.span_id));
}
