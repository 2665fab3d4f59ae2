//! End to end, with the real binary: SIGTERM while requests are in flight lets every one
//! of them finish, then the process exits 0; a request that runs past the grace period
//! does not hold the exit back beyond it.

use crate::common;

use std::time::Duration;

use common::process::ServerProcess;
use common::{output_f32, request};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_in_flight_requests_and_exits_zero() {
    // Items wait up to 1.5 s in the queue for company: they are in flight when the
    // signal arrives.
    let repository = common::faulty_repository(&common::faulty_config(
        "max_batch_size = 64\nmax_queue_delay_us = 1500000",
        "instances = 1",
    ));
    // Ready: its model has loaded.
    let mut server = ServerProcess::spawn(repository.path(), &[]).await;
    let (client, url) = (server.client.clone(), server.url(common::FAULTY_INFER));
    let requests: Vec<_> = (0..8)
        .map(|i| {
            let (client, url) = (client.clone(), url.clone());
            tokio::spawn(async move {
                let r = client
                    .post(url)
                    .json(&request("x", "FP32", &[1, 1], json!([i as f32])))
                    .send()
                    .await?;
                let status = r.status().as_u16();
                let body: serde_json::Value = r.json().await?;
                Ok::<_, reqwest::Error>((status, body))
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(400)).await;
    server.terminate();

    for (i, task) in requests.into_iter().enumerate() {
        let (status, body) = task.await.unwrap().expect("request completed");
        assert_eq!(status, 200, "{body}");
        assert_eq!(output_f32(&body, "y"), vec![2.0 * i as f32]);
    }
    let exit = server.wait_exit(Duration::from_secs(60)).await.expect("exited");
    assert_eq!(exit.code(), Some(0));
    let log = server.log();
    assert!(log.iter().any(|l| l.contains("shutting down")), "{log:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drain_ends_within_the_grace_period_even_with_a_request_running_past_it() {
    // A plugin call that spins for 20 s (its own deadline), and a grace period of 1 s.
    let repository = common::faulty_repository(&common::faulty_config(
        "max_batch_size = 4",
        "instances = 1\ntimeout_ms = 20000\nrequest_timeout_ms = 30000",
    ));
    let mut server = ServerProcess::spawn(repository.path(), &["--shutdown-grace-secs", "1"]).await;
    let client = server.client.clone();
    let url = server.url(common::FAULTY_INFER);
    let spinning = tokio::spawn(async move {
        client
            .post(url)
            .json(&request("x", "FP32", &[1, 1], json!([-2.0])))
            .send()
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let signalled = std::time::Instant::now();
    server.terminate();
    let exit = server.wait_exit(Duration::from_secs(10)).await;
    let took = signalled.elapsed();
    assert!(exit.is_some(), "the server did not exit within 10 s of SIGTERM");
    assert!(
        took < Duration::from_millis(1800),
        "the drain took {took:?} with a grace period of 1 s"
    );
    assert!(
        server.log().iter().any(|l| l.contains("grace period over")),
        "{:?}",
        server.log()
    );
    spinning.abort();
}

/// With `--shutdown-delay-ms`, SIGTERM turns readiness off at once but the server keeps
/// accepting and answering for the delay (what a balancer that has not yet seen the
/// readiness change sends still succeeds), then drains and exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_delay_serves_new_connections_with_readiness_off() {
    let repository = common::faulty_repository(&common::faulty_config("max_batch_size = 4", "instances = 1"));
    let mut server = ServerProcess::spawn(repository.path(), &["--shutdown-delay-ms", "1500"]).await;
    let signalled = std::time::Instant::now();
    server.terminate();
    tokio::time::sleep(Duration::from_millis(300)).await;

    // A fresh client: a new connection, as a balancer would open.
    let fresh = reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap();
    let ready = fresh
        .get(server.url("/v2/health/ready"))
        .send()
        .await
        .expect("accepted");
    assert_eq!(ready.status().as_u16(), 503, "readiness is off at once");
    let (status, body) = infer_on_a_new_connection(&server).await;
    assert_eq!(status, 200);
    assert_eq!(output_f32(&body, "y"), vec![6.0]);
    assert!(
        signalled.elapsed() < Duration::from_millis(1500),
        "the check ran within the delay"
    );

    let exit = server.wait_exit(Duration::from_secs(30)).await.expect("exited");
    assert_eq!(exit.code(), Some(0));
    assert!(
        signalled.elapsed() >= Duration::from_millis(1500),
        "it served for the whole delay"
    );
    let log = server.log();
    assert!(
        log.iter().any(|l| l.contains("serving on while load balancers notice")),
        "{log:?}"
    );
}

/// On demand, a model on standby is still loaded by a request that comes during the
/// shutdown delay (a balancer that has not seen readiness turn off sends it here): it is
/// answered, not refused as if the drain had begun.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn during_a_shutdown_delay_a_model_on_standby_is_still_loaded_for_its_request() {
    let repository = common::faulty_repository(&common::faulty_config("max_batch_size = 4", "instances = 1"));
    let mut server = ServerProcess::spawn(
        repository.path(),
        &["--residency", "on-demand", "--shutdown-delay-ms", "1500"],
    )
    .await;
    server.terminate();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, body) = infer_on_a_new_connection(&server).await;
    assert_eq!(status, 200, "{body}");
    let exit = server.wait_exit(Duration::from_secs(30)).await.expect("exited");
    assert_eq!(exit.code(), Some(0));
}

/// `faulty` asked for 2 × 3 on a connection of its own (as a balancer opens one).
async fn infer_on_a_new_connection(server: &ServerProcess) -> (u16, serde_json::Value) {
    let fresh = reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap();
    let answer = fresh
        .post(server.url(common::FAULTY_INFER))
        .json(&request("x", "FP32", &[1, 1], json!([3.0])))
        .send()
        .await
        .expect("still accepting during the delay");
    let status = answer.status().as_u16();
    (status, answer.json().await.unwrap_or_default())
}

/// A shutdown delay longer than the grace cannot hold the exit past the grace: the delay
/// counts within it (an operator's mistake, or a hostile setting, costs at most the grace).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_delay_past_the_grace_ends_with_the_grace() {
    let repository = common::faulty_repository(&common::faulty_config("max_batch_size = 4", "instances = 1"));
    let mut server = ServerProcess::spawn(
        repository.path(),
        &["--shutdown-delay-ms", "600000", "--shutdown-grace-secs", "1"],
    )
    .await;
    let signalled = std::time::Instant::now();
    server.terminate();
    let exit = server
        .wait_exit(Duration::from_secs(10))
        .await
        .expect("exited within 10 s");
    assert_eq!(exit.code(), Some(0));
    assert!(
        signalled.elapsed() < Duration::from_secs(5),
        "exited {:?} after SIGTERM, with a grace of 1 s",
        signalled.elapsed()
    );
}
