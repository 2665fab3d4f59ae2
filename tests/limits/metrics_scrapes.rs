//! `/metrics` under a metric-flooding plugin: one model fills its plugin metrics up to
//! the per-model byte cap (fault -37 of the faulty plugin), then 16 clients scrape at
//! once. Concurrent scrapes share one encoding, so the server's peak memory grows by a
//! few pages, not by one page (and its growth while being written) per scrape.

use std::path::Path;
use std::time::Instant;

use serde_json::json;

use crate::common;
use common::process::ServerProcess;

const MIB: u64 = 1024 * 1024;
const SCRAPES: usize = 16;

/// What 16 concurrent scrapes may add to the server's peak memory: the page being
/// encoded and the one shared (the encoder writes into one allocation sized from the
/// last page), twice for the allocator's slack, plus a fixed allowance for connections,
/// the encoding thread and the allocator's own bookkeeping — well below the 16 pages
/// that one encoding per scrape would hold.
fn memory_bound_kib(page_len: usize) -> u64 {
    (4 * page_len as u64 + 4 * MIB) / 1024
}

/// The faulty plugin alone, one instance.
fn repository() -> tempfile::TempDir {
    common::faulty_repository(&common::faulty_config("max_batch_size = 1", "instances = 1"))
}

async fn scrape(server: &ServerProcess) -> usize {
    let response = server
        .client
        .get(server.url("/metrics"))
        .send()
        .await
        .expect("GET /metrics");
    assert_eq!(response.status(), 200);
    response.bytes().await.expect("the page").len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_scrapes_of_the_largest_page_cost_a_few_pages() {
    let _alone = crate::ONE_AT_A_TIME.lock().await;
    let repository = repository();
    let mut server = ServerProcess::spawn(Path::new(repository.path()), &[]).await;
    let empty = scrape(&server).await;
    let response = server
        .client
        .post(server.url(common::FAULTY_INFER))
        .json(&common::request("x", "FP32", &[1, 1], json!([-37.0])))
        .send()
        .await
        .expect("flood");
    let status = response.status().as_u16();
    let answer = response.text().await.expect("answer");
    assert_eq!(status, 422, "{answer}");
    assert!(answer.contains("plugin_metrics_bytes_per_model"), "{answer}");
    let page = scrape(&server).await;
    assert!(
        page - empty <= 1 << 20,
        "one model added {} bytes past the 1 MiB cap",
        page - empty
    );

    let before = server.rss_kib();
    server.reset_peak_rss();
    let started = Instant::now();
    let tasks: Vec<_> = (0..SCRAPES)
        .map(|_| {
            let (client, url) = (server.client.clone(), server.url("/metrics"));
            tokio::spawn(async move {
                let response = client.get(url).send().await.expect("GET /metrics");
                assert_eq!(response.status(), 200);
                response.bytes().await.expect("the page").len()
            })
        })
        .collect();
    let lens = common::join_all(tasks).await;
    let took = started.elapsed();
    let peak = server.peak_rss_kib();
    assert!(server.is_alive(), "the server died");
    assert!(lens.iter().all(|&len| len >= page), "{lens:?}");
    let grew = peak.saturating_sub(before);
    eprintln!(
        "{SCRAPES} concurrent scrapes of a {page}-byte page: peak RSS +{grew} KiB (bound {} KiB), {took:?}",
        memory_bound_kib(page)
    );
    assert!(
        grew <= memory_bound_kib(page),
        "{SCRAPES} scrapes of a {page}-byte page raised the peak by {grew} KiB (bound {} KiB)",
        memory_bound_kib(page)
    );
}
