//! Requests written to hurt the server: bodies whose cost is out of proportion to their
//! size, oversized echoes, media types and codings the server must not misread, and
//! random mutations of good requests. Each runs against the real binary as a child
//! process, so the memory and the log lines measured are the server's own.

use crate::common;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::process::ServerProcess;
use serde_json::{json, Value};

fn examples() -> PathBuf {
    common::examples()
}

const MIB: u64 = 1024 * 1024;

/// The bound (docs/limits.md) on what one request may hold while it decodes: its body, its
/// decoded tensors (at most four bytes per byte of JSON) and a bounded amount per
/// input — asserted here as 6 × the body plus a fixed allowance for the allocator and
/// the response.
fn memory_bound_kib(body_len: usize) -> u64 {
    (6 * body_len as u64 + 32 * MIB) / 1024
}

/// Posts `body` as JSON, returning the status, the answer and how long it took.
async fn post(server: &ServerProcess, path: &str, body: Vec<u8>) -> (u16, String, Duration) {
    server.post_timed(path, body, Duration::from_secs(60)).await
}

/// Sends `body` and checks the server answers 400 quickly, stays up, and its peak
/// memory while handling it stays within the stated bound.
async fn refused_within_bounds(server: &mut ServerProcess, what: &str, body: Vec<u8>, expect: &str) {
    let len = body.len();
    let before = server.rss_kib();
    server.reset_peak_rss();
    let (status, answer, took) = post(server, common::DIGITS_INFER, body).await;
    let peak = server.peak_rss_kib();
    assert_eq!(status, 400, "{what}: {answer}");
    assert!(answer.contains(expect), "{what}: {answer}");
    assert!(answer.len() < 1024, "{what}: the answer is {} bytes", answer.len());
    assert!(took < Duration::from_secs(10), "{what}: took {took:?}");
    assert!(server.is_alive(), "{what}: the server died");
    let grew = peak.saturating_sub(before);
    eprintln!(
        "{what}: {} KiB body, peak RSS +{grew} KiB, answered in {took:?}",
        len / 1024
    );
    assert!(
        grew <= memory_bound_kib(len),
        "{what}: peak RSS grew by {grew} KiB for a {} KiB body (bound {} KiB)",
        len / 1024,
        memory_bound_kib(len)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn costly_request_shapes_are_refused_within_a_memory_bound() {
    let _alone = crate::ONE_AT_A_TIME.lock().await;
    let mut server = ServerProcess::spawn(&examples(), &[]).await;

    // Many tiny inputs, each declaring a huge shape: this 7.5 MiB body used to abort the
    // server (each input reserved memory from its declared shape).
    let mut body = String::from(r#"{"inputs":["#);
    let mut i = 0;
    while body.len() < 15 * MIB as usize / 2 {
        if i > 0 {
            body.push(',');
        }
        let _ = write!(
            body,
            r#"{{"name":"i{i}","datatype":"FP32","shape":[100000000],"data":[1]}}"#
        );
        i += 1;
    }
    body.push_str("]}");
    refused_within_bounds(
        &mut server,
        "tiny inputs, huge shapes",
        body.into_bytes(),
        "more than 1024 inputs",
    )
    .await;

    // `data` before `datatype`: used to be built as a JSON tree first (16-21 bytes of
    // memory per byte of body).
    let count = 5_000_000 / 64 * 64;
    let mut body = String::from(r#"{"inputs":[{"name":"input-0","data":["#);
    for n in 0..count {
        body.push_str(if n == 0 { "0.5" } else { ",0.5" });
    }
    let _ = write!(body, r#"],"datatype":"FP32","shape":[{},64]}}]}}"#, count / 64);
    refused_within_bounds(&mut server, "data before datatype", body.into_bytes(), "queues at most").await;

    // A huge `outputs` list and a huge structured parameter: used to be JSON trees.
    let outputs: Vec<Value> = (0..400_000).map(|i| json!({"name": format!("y{i}")})).collect();
    let body = json!({"inputs": [], "outputs": outputs}).to_string();
    refused_within_bounds(
        &mut server,
        "huge outputs",
        body.into_bytes(),
        "more than 1024 requested outputs",
    )
    .await;
    let numbers: Vec<u32> = (0..3_000_000).collect();
    let body = json!({"parameters": {"custom": numbers}, "inputs": {}}).to_string();
    refused_within_bounds(
        &mut server,
        "huge parameter",
        body.into_bytes(),
        "must be an array, got an object",
    )
    .await;

    // Nothing was lost: the model still answers.
    let (status, answer, _) = post(
        &server,
        common::DIGITS_INFER,
        digits_request(1).to_string().into_bytes(),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
}

/// A digits request with `n` blank images.
fn digits_request(n: usize) -> Value {
    json!({"inputs": [{"name": "input-0", "datatype": "FP32", "shape": [n, 64], "data": vec![0.0; n * 64]}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_values_are_echoed_bounded_in_answers_and_logs() {
    let _alone = crate::ONE_AT_A_TIME.lock().await;
    let server = ServerProcess::spawn(&examples(), &[]).await;
    let long = "n".repeat(MIB as usize);
    let mut named = digits_request(1);
    named["inputs"][0]["name"] = json!(long);
    let mut with_id = digits_request(1);
    with_id["id"] = json!(long);
    let mut with_value = digits_request(1);
    with_value["inputs"][0]["datatype"] = json!(long);
    for (what, body) in [("name", named), ("id", with_id), ("datatype", with_value)] {
        let (status, answer, _) = post(&server, common::DIGITS_INFER, body.to_string().into_bytes()).await;
        assert_eq!(status, 400, "{what}: {answer}");
        assert!(answer.len() < 512, "{what}: a {} byte answer", answer.len());
    }
    // A long model name in the URL is quoted cut, too.
    let path = format!("/v2/models/{}/infer", "m".repeat(4000));
    let (status, answer, _) = post(&server, &path, digits_request(1).to_string().into_bytes()).await;
    assert_eq!(status, 404);
    assert!(answer.len() < 512, "{answer}");
    // A long but allowed id is attached to log lines cut.
    let mut allowed = digits_request(1);
    allowed["id"] = json!("i".repeat(200));
    let (status, answer, _) = post(&server, common::DIGITS_INFER, allowed.to_string().into_bytes()).await;
    assert_eq!(status, 200, "{answer}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let log = server.log();
    let longest = log.iter().map(String::len).max().unwrap_or(0);
    assert!(longest < 2048, "a {longest} byte log line");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_bodies_decode_without_delaying_health_checks() {
    let _alone = crate::ONE_AT_A_TIME.lock().await;
    let server = ServerProcess::spawn(&examples(), &[]).await;
    // 30 MiB of JSON numbers, decoded in full, then refused for its unknown input.
    let mut body = String::from(r#"{"inputs":[{"name":"unknown","datatype":"FP64","shape":["#);
    let count = 30 * MIB as usize / 4;
    let _ = write!(body, "{count}],\"data\":[");
    for n in 0..count {
        body.push_str(if n == 0 { "1.5" } else { ",1.5" });
    }
    body.push_str("]}]}");
    let body = bytes::Bytes::from(body);

    let probe = async {
        let mut slowest = Duration::ZERO;
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(3) {
            let sent = Instant::now();
            let response = server.client.get(server.url("/v2/health/live")).send().await;
            assert!(response.is_ok_and(|r| r.status().is_success()));
            slowest = slowest.max(sent.elapsed());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        slowest
    };
    let uploads = async {
        let mut statuses = Vec::new();
        let mut quickest = Duration::MAX;
        for _ in 0..3 {
            let (a, b) = tokio::join!(
                post(&server, common::DIGITS_INFER, body.to_vec()),
                post(&server, common::DIGITS_INFER, body.to_vec())
            );
            statuses.push((a.0, b.0));
            quickest = quickest.min(a.2).min(b.2);
        }
        (statuses, quickest)
    };
    let (slowest, (statuses, quickest_upload)) = tokio::join!(probe, uploads);
    eprintln!(
        "slowest /v2/health/live while decoding 30 MiB bodies: {slowest:?} (quickest upload and decode: {quickest_upload:?})"
    );
    assert!(statuses.iter().all(|s| *s == (400, 400)), "{statuses:?}");
    // Decoding on an async worker held health checks up for about as long as a decode
    // (two at once took both workers); off the workers, a health check waits only for a
    // scheduler slice. Relative to the decode time, the bound holds on a loaded machine.
    let bound = (quickest_upload / 4).max(Duration::from_millis(100));
    assert!(slowest < bound, "a health check took {slowest:?} (bound {bound:?})");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn media_types_and_codings_the_server_cannot_read_get_415() {
    let _alone = crate::ONE_AT_A_TIME.lock().await;
    let server = ServerProcess::spawn(&examples(), &[]).await;
    let body = digits_request(1).to_string();
    let send = |content_type: Option<&'static str>, encoding: Option<&'static str>| {
        let mut request = server.client.post(server.url(common::DIGITS_INFER)).body(body.clone());
        if let Some(t) = content_type {
            request = request.header("content-type", t);
        }
        if let Some(e) = encoding {
            request = request.header("content-encoding", e);
        }
        async move {
            let response = request.send().await.expect("answer");
            (response.status().as_u16(), response.text().await.unwrap_or_default())
        }
    };
    for (content_type, encoding, expected) in [
        (Some("text/plain"), None, 415),
        (Some("application/x-www-form-urlencoded"), None, 415),
        (Some("application/json; charset=latin1"), None, 415),
        (Some("application/json"), Some("gzip"), 415),
        (Some("application/json; charset=utf-8"), None, 200),
        (Some("application/octet-stream"), None, 200),
        (None, None, 200),
    ] {
        let (status, answer) = send(content_type, encoding).await;
        assert_eq!(status, expected, "{content_type:?} {encoding:?}: {answer}");
        if expected == 415 {
            assert!(answer.contains("not supported"), "{answer}");
        }
    }
    // A transfer coding stacked on chunked is not read as plain chunked.
    let chunk = format!("{:x}\r\n{body}\r\n0\r\n\r\n", body.len());
    let raw = format!(
        "POST /v2/models/digits/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Transfer-Encoding: gzip, chunked\r\nConnection: close\r\n\r\n{chunk}"
    );
    let answer = server.raw_exchange(raw.as_bytes(), Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 4"), "{answer}");
    // Invalid UTF-8 inside a string is a 400.
    let mut bad = br#"{"id":"x"#.to_vec();
    bad.extend_from_slice(&[0xc3, 0x28]);
    bad.extend_from_slice(br#"","inputs":[]}"#);
    let (status, answer, _) = post(&server, common::DIGITS_INFER, bad).await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer.contains("UTF-8"), "{answer}");
}

/// Random mutations of good requests: the server never fails (5xx) or dies, and a body
/// that is not valid JSON always gets a 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutated_requests_get_a_4xx_or_an_answer_never_a_crash() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};

    let _alone = crate::ONE_AT_A_TIME.lock().await;
    let mut server = ServerProcess::spawn(&examples(), &[]).await;
    let good = serde_json::to_vec(&json!({
        "id": "a", "parameters": {"timeout": 1000000},
        "inputs": [{"name": "input-0", "datatype": "FP32", "shape": [2, 64], "data": vec![3.0; 128]}],
        "outputs": [{"name": "label"}]
    }))
    .unwrap();
    // Each mutation: at some position, overwrite, insert or delete a few bytes, drawn
    // from JSON's own tokens as well as arbitrary bytes.
    let token = prop_oneof![
        any::<u8>().prop_map(|b| vec![b]),
        Just(b"{".to_vec()),
        Just(b"}".to_vec()),
        Just(b"[".to_vec()),
        Just(b"]".to_vec()),
        Just(b"\"".to_vec()),
        Just(b",".to_vec()),
        Just(b"-1".to_vec()),
        Just(b"1e400".to_vec()),
        Just(b"null".to_vec()),
        Just(b"99999999999999999999".to_vec()),
        Just(b"\"BYTES\"".to_vec()),
        Just(b"\\u0000".to_vec()),
    ];
    let mutation = (0..good.len(), 0usize..3, 0usize..4, token);
    let cases = proptest::collection::vec(mutation, 1..4);
    let mut runner = TestRunner::new(Config {
        cases: 300,
        failure_persistence: None,
        ..Config::default()
    });
    let runtime = tokio::runtime::Handle::current();
    let statuses = std::sync::Mutex::new(std::collections::BTreeMap::<u16, usize>::new());
    let result = tokio::task::block_in_place(|| {
        runner.run(&cases, |mutations| {
            let mut body = good.clone();
            for (at, kind, len, token) in mutations {
                let at = at.min(body.len());
                match kind {
                    0 => {
                        let end = (at + token.len()).min(body.len());
                        body.splice(at..end, token);
                    }
                    1 => {
                        body.splice(at..at, token);
                    }
                    _ => {
                        body.drain(at..(at + len).min(body.len()));
                    }
                }
            }
            let is_json = serde_json::from_slice::<Value>(&body).is_ok();
            let (status, answer, _) = runtime.block_on(post(&server, common::DIGITS_INFER, body.clone()));
            *statuses.lock().unwrap().entry(status).or_default() += 1;
            // 504: a mutated `timeout` parameter can be a valid, tiny deadline.
            prop_assert!(
                status < 500 || status == 504,
                "{status} for {}: {answer}",
                String::from_utf8_lossy(&body)
            );
            prop_assert!(
                is_json || status == 400,
                "{status} for invalid JSON {}",
                String::from_utf8_lossy(&body)
            );
            Ok(())
        })
    });
    eprintln!("statuses of mutated requests: {:?}", statuses.lock().unwrap());
    result.unwrap();
    assert!(server.is_alive());
}
