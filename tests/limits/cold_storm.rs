//! A storm of cold starts against the real binary: 1,000 concurrent first requests to
//! 1,000 different models on standby, under a memory budget that holds a few dozen. Every
//! request is answered 200, or 503 with `Retry-After` when its model found no room in
//! time (504 when it did, but too near its deadline to run); none is lost or fails
//! otherwise (no 500, no 404), and the server's memory stays within the budget plus a
//! stated margin.

use std::time::Duration;

use crate::common;
use common::process::ServerProcess;

/// Models on standby, and first requests, one to each at once.
const MODELS: usize = 1_000;
/// What resident models may hold: ~45 of these one-instance models.
const BUDGET_MIB: u64 = 64;
/// The server besides its models: runtime, threads, buffers of 1,000 connections.
const MARGIN_MIB: u64 = 160;
/// The server's threads: runtime, loaders, blocking ones for the requests' work, and the
/// few stage files sized at once.
const MOST_THREADS: usize = 64;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_first_requests_to_a_thousand_models_are_answered_within_the_budget() {
    let _alone = crate::ONE_AT_A_TIME.lock().await;
    let repository = tempfile::tempdir().expect("temp dir");
    let plugin = common::root().join("tests/models/faulty/predict.wasm");
    let toml = common::faulty_config("max_batch_size = 8", "instances = 1");
    for k in 0..MODELS {
        let dir = repository.path().join(format!("m{k}"));
        std::fs::create_dir(&dir).unwrap();
        std::fs::hard_link(&plugin, dir.join("predict.wasm")).unwrap();
        std::fs::write(dir.join("model.toml"), &toml).unwrap();
    }
    let budget = BUDGET_MIB.to_string();
    let server = ServerProcess::spawn(
        repository.path(),
        &[
            "--residency",
            "on-demand",
            "--memory-budget-mib",
            &budget,
            "--max-connections",
            "2000",
        ],
    )
    .await;
    server.reset_peak_rss();
    // What the resident models hold, and the server's threads, sampled throughout the storm.
    let sampling = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let (sampling, metrics, pid) = (sampling.clone(), server.url("/metrics"), server.pid());
        tokio::spawn(async move {
            let (mut most_held, mut most_threads) = (0f64, 0);
            while sampling.load(std::sync::atomic::Ordering::Relaxed) {
                most_threads = most_threads.max(threads_of(pid));
                if let Some(page) = common::metrics::scrape_url(&metrics).await {
                    most_held = most_held.max(page.value("tensorplug_resident_memory_bytes", &[]));
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            (most_held, most_threads)
        })
    };
    let client = reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap();
    let tasks: Vec<_> = (0..MODELS)
        .map(|k| {
            let (client, url) = (client.clone(), server.url(&format!("/v2/models/m{k}/infer")));
            tokio::spawn(async move {
                let response = client
                    .post(url)
                    .json(&common::items_request(&[1.0]))
                    .timeout(Duration::from_secs(120))
                    .send()
                    .await
                    .expect("an answer");
                let status = response.status().as_u16();
                let retry = response.headers().contains_key("retry-after");
                (status, retry)
            })
        })
        .collect();
    let answers = common::join_all(tasks).await;
    let ok = answers.iter().filter(|(status, _)| *status == 200).count();
    let refused = answers
        .iter()
        .filter(|(status, retry)| *status == 503 && *retry)
        .count();
    let late = answers.iter().filter(|(status, _)| *status == 504).count();
    let peak_mib = server.peak_rss_kib() / 1024;
    eprintln!("{ok} answered 200, {refused} refused 503 with Retry-After, {late} 504; peak RSS {peak_mib} MiB");
    // 504: resident in time, but too near its deadline to run (the request's own limit).
    assert_eq!(
        ok + refused + late,
        MODELS,
        "no 500, no 404, no 503 without Retry-After"
    );
    assert!(ok > 0);
    sampling.store(false, std::sync::atomic::Ordering::Relaxed);
    let (most_resident, most_threads) = sampler.await.expect("sampler");
    eprintln!(
        "resident models held at most {:.1} MiB, the server ran at most {most_threads} threads; after the storm: \
         RSS {} MiB",
        most_resident / f64::from(1 << 20),
        server.rss_kib() / 1024
    );
    assert!(peak_mib <= BUDGET_MIB + MARGIN_MIB, "peak RSS {peak_mib} MiB");
    // Sizing 1,000 models never loaded once took a blocking thread and a copy of the
    // stage file each, all at once (a cold CI run peaked at 245 MiB).
    assert!(most_threads <= MOST_THREADS, "{most_threads} threads");
    // A model never loaded reserves what its instances declare (and its files), so even
    // the first loads keep the measured sum under the budget.
    assert!(most_resident <= (BUDGET_MIB << 20) as f64, "{most_resident}");
    assert!(most_resident > 0.0, "the sampler saw models resident");
}

/// How many threads process `pid` runs now.
fn threads_of(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |tasks| tasks.count())
}
