//! End to end: one rule for failures in every language. A whole-call error that is the
//! plugin's own failure (a 5xx, which is what a JavaScript `throw` in predict becomes) is
//! isolated like a trap, at no more re-runs; a deliberate 4xx refusal of one request's
//! batch is still given to all its items, without re-runs.

use crate::common;

use common::{output_f32, TestServer};

/// The plugin's calls that returned (its counter `batches`) and the items its calls
/// reached (its histogram `item_value`, observed before any fault): neither is lost to a
/// trap, since the host keeps plugin metrics.
async fn plugin_work(server: &TestServer) -> (f64, f64) {
    let page = common::metrics::scrape(server).await;
    let labels = [("model", "faulty")];
    (
        page.value_or_zero("tensorplug_plugin_batches_total", &labels),
        page.value_or_zero("tensorplug_plugin_item_value_count", &labels),
    )
}

/// One request of 32 items, item 13 being `fault`: checks that only it failed, with
/// `status` and `needle`, and returns the plugin's work for it (see [`plugin_work`]).
async fn thirty_two_with_one_fault(server: &TestServer, fault: f32, status: u64, needle: &str) -> (f64, f64) {
    let before = plugin_work(server).await;
    let values: Vec<f32> = (0..32).map(|i| if i == 13 { fault } else { i as f32 }).collect();
    let (code, body) = server.post_faulty(&values).await;
    assert_eq!(code, 207, "fault {fault}: {body}");
    let results = body["results"].as_array().unwrap();
    for (i, result) in results.iter().enumerate() {
        if i == 13 {
            assert_eq!(result["status"], status, "fault {fault}: {result}");
            let error = result["error"].as_str().unwrap();
            assert!(error.contains(needle), "fault {fault}: {error}");
        } else {
            assert_eq!(result["status"], 200, "fault {fault}, item {i}: {result}");
            assert_eq!(output_f32(result, "y"), vec![2.0 * i as f32], "fault {fault}, item {i}");
        }
    }
    let after = plugin_work(server).await;
    (after.0 - before.0, after.1 - before.1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thrown_exception_fails_only_its_item_at_no_more_calls_than_a_trap() {
    let server = TestServer::start_faulty("max_batch_size = 32\nmax_queue_delay_us = 2000", "instances = 1").await;
    let thrown = thirty_two_with_one_fault(&server, -70.0, 500, "faulty: uncaught exception").await;
    let stats = common::stats(&server, "faulty").await;
    assert_eq!(stats["traps"], 0, "an error is no trap: {stats}");
    let trapped = thirty_two_with_one_fault(&server, -1.0, 500, "faulty: panic requested").await;
    eprintln!(
        "32 items, one culprit: a whole-call error took {} returning calls reaching {} items, a trap {} reaching {}",
        thrown.0, thrown.1, trapped.0, trapped.1
    );
    // Halving 32 items to one: one returning call per level (⌈log2 32⌉ = 5) at most.
    assert!(thrown.0 >= 1.0 && thrown.0 <= 5.0, "{thrown:?}");
    assert!(
        thrown.0 <= trapped.0 && thrown.1 <= trapped.1,
        "error {thrown:?} against trap {trapped:?}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deliberate_4xx_refusal_of_one_request_fails_its_items_in_one_call() {
    let server = TestServer::start_faulty("max_batch_size = 8\nmax_queue_delay_us = 2000", "instances = 1").await;
    let before = plugin_work(&server).await;
    let (code, body) = server.post_faulty(&[1.0, -15.0, 3.0, 4.0]).await;
    assert_eq!(code, 207, "{body}");
    for result in body["results"].as_array().unwrap() {
        assert_eq!(result["status"], 400, "{body}");
        assert!(result["error"].as_str().unwrap().contains("batch rejected"), "{body}");
    }
    let after = plugin_work(&server).await;
    // One call reaching its first two items, and no re-run.
    assert_eq!(
        (after.0 - before.0, after.1 - before.1),
        (0.0, 2.0),
        "a refusal is not bisected"
    );
    server.stop().await;
}
