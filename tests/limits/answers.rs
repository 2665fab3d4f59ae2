//! An answer's size and an instance's memory, as a plugin with a large memory cap can
//! push them: an item whose outputs pass the model's `max_answer_mib` fails (500) without
//! being encoded, and an instance whose memory grew far past its start is replaced once
//! its call is over, so the process gives that memory back.

use std::time::{Duration, Instant};

use crate::common;
use common::process::ServerProcess;

/// The faulty model with a variable-width output (fault -51: 16 MiB per item), a memory
/// cap far above the answer cap, and one instance.
fn repository(max_answer_mib: u64) -> tempfile::TempDir {
    common::faulty_repository(&format!(
        "[stages]\npredict = \"predict.wasm\"\n\n[[inputs]]\nname = \"x\"\ndatatype = \"FP32\"\nshape = [1]\n\n\
         [[outputs]]\nname = \"y\"\ndatatype = \"FP32\"\nshape = [-1]\n\n[batching]\nmax_batch_size = 8\n\n\
         [limits]\ninstances = 1\nmemory_mib = 1024\ntimeout_ms = 20000\nmax_answer_mib = {max_answer_mib}\n"
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_answers_fail_their_items_and_grown_instances_give_their_memory_back() {
    let repository = repository(8);
    let server = ServerProcess::spawn(repository.path(), &[]).await;
    let body = serde_json::json!({"inputs": [{"name": "x", "datatype": "FP32", "shape": [6, 1],
        "data": [-51.0, -51.0, -51.0, -51.0, -51.0, -51.0]}]});
    let before = server.rss_kib();
    let started = Instant::now();
    let response = server
        .client
        .post(server.url("/v2/models/faulty/infer"))
        .json(&body)
        .send()
        .await
        .expect("answered");
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    let took = started.elapsed();
    // Six items of 16 MiB each past an 8 MiB cap: each its own 500, a small answer.
    assert_eq!(status, 207, "{}", &text[..text.len().min(400)]);
    assert_eq!(
        text.matches("\"status\":500").count(),
        6,
        "{}",
        &text[..text.len().min(400)]
    );
    assert!(
        text.contains("limits.max_answer_mib (8 MiB)"),
        "{}",
        &text[..text.len().min(400)]
    );
    assert!(text.len() < 4096, "{} bytes", text.len());
    let log = server
        .wait_for_log("the grown instance replaced", |l| {
            l.contains("instance replaced to give its grown memory back")
        })
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = server.rss_kib();
    eprintln!(
        "6 x 16 MiB outputs past an 8 MiB answer cap: answered {status} in {took:?}, {} bytes; \
         RSS {before} -> {after} KiB after the instance was replaced ({log})",
        text.len()
    );
    // The instance grew by ~100 MiB of outputs; what stays is the allocator's, not it.
    assert!(after.saturating_sub(before) < 64 * 1024, "RSS {before} -> {after} KiB");
    // The replacement serves.
    let ok = server
        .client
        .post(server.url("/v2/models/faulty/infer"))
        .json(&serde_json::json!({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 1], "data": [2.0]}]}))
        .send()
        .await
        .expect("answered");
    assert_eq!(ok.status(), 200);
}
