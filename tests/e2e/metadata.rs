//! A version's metadata is what its first successful `init` declared: later inits (more
//! instances, replacements after a trap) that declare something else change nothing.

use crate::common;
use common::TestServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_stays_what_the_first_init_declared() {
    // Every init declares its own `nonce`; two instances make two inits at load.
    let config = format!(
        "{}\n[parameters]\nrandom_metadata = \"true\"\n",
        common::faulty_config("max_batch_size = 1", "instances = 2")
    );
    let repository = common::faulty_repository(&config);
    let server = TestServer::start(repository.path()).await;
    let nonce = |metadata: &serde_json::Value| metadata["parameters"]["nonce"].as_str().map(str::to_owned);
    let (status, metadata) = server.get("/v2/models/faulty").await;
    assert_eq!(status, 200, "{metadata}");
    let first = nonce(&metadata).expect("a nonce");
    assert_eq!(metadata["parameters"]["purpose"], "fault injection");
    // Each panic replaces an instance, whose init declares another nonce.
    for _ in 0..3 {
        let (status, body) = server.post_faulty(&[-1.0]).await;
        assert_eq!(status, 500, "{body}");
    }
    let stats = common::stats(&server, "faulty").await;
    assert!(stats["instance_replacements"].as_u64().unwrap_or(0) >= 3, "{stats}");
    let (_, metadata) = server.get("/v2/models/faulty").await;
    assert_eq!(nonce(&metadata), Some(first), "{metadata}");
    // The second instance's init at load, then one per replacement: each counted.
    let labels = [("model", "faulty"), ("version", "1")];
    let mut ignored = 0.0;
    for _ in 0..100 {
        ignored = common::metrics::scrape(&server)
            .await
            .value_or_zero("tensorplug_metadata_changes_ignored_total", &labels);
        if ignored >= 4.0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(ignored, 4.0, "metadata changes ignored");
    server.stop().await;
}
