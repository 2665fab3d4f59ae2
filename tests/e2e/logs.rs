//! What the server writes to its log: JSON lines for collectors, plain text (no colour
//! codes) when not writing to a terminal, and the model named on per-request lines.

use crate::common;
use common::process::ServerProcess;

/// A request for a model nobody serves, which logs one "request failed" line.
async fn failing_request(server: &ServerProcess) {
    let response = server
        .client
        .post(server.url("/v2/models/absent/infer"))
        .header("content-type", "application/json")
        .body(r#"{"inputs":[]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_are_one_object_per_line() {
    let server = ServerProcess::spawn(&common::examples(), &["--log-format", "json"]).await;
    failing_request(&server).await;
    let log = server.log();
    assert!(!log.is_empty());
    for line in &log {
        let record: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert!(record["level"].is_string(), "{line}");
        assert!(record["fields"]["message"].is_string(), "{line}");
    }
    let failed = log
        .iter()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .find(|record| {
            record["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("request failed"))
        })
        .expect("a request-failed record");
    assert_eq!(failed["fields"]["model"], "absent");
    assert_eq!(failed["fields"]["status"], 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_logs_to_a_pipe_carry_no_colour_codes() {
    let server = ServerProcess::spawn(&common::examples(), &[]).await;
    failing_request(&server).await;
    let log = server.log();
    assert!(
        log.iter()
            .any(|l| l.contains("request failed") && l.contains("model=absent")),
        "{log:?}"
    );
    assert!(log.iter().all(|l| !l.contains('\u{1b}')), "colour codes in {log:?}");
}
