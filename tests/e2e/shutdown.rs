//! End to end, with the real binary: SIGTERM while requests are in flight lets every one
//! of them finish, then the process exits 0; a request that runs past the grace period
//! does not hold the exit back beyond it.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
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
    let mut child = Command::new(env!("CARGO_BIN_EXE_tensorplug"))
        .args([
            "serve",
            "--host",
            "127.0.0.1",
            "--http-port",
            "0",
            "--grpc-port",
            "off",
            "--log",
            "info",
            "--no-cache",
        ])
        .arg(repository.path())
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start tensorplug");
    let stdout = child.stdout.take().expect("stdout");
    let (lines_tx, lines_rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = lines_tx.send(line);
        }
    });
    let address = loop {
        let line = lines_rx.recv_timeout(Duration::from_secs(60)).expect("server log line");
        if let Some(rest) = line.split(" address=").nth(1) {
            break rest.split_whitespace().next().expect("address").to_string();
        }
    };

    let client = reqwest::Client::new();
    // The server listens while its model loads: wait until it is ready.
    for _ in 0..600 {
        let ready = client.get(format!("http://{address}/v2/health/ready")).send().await;
        if ready.is_ok_and(|r| r.status().is_success()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let url = format!("http://{address}/v2/models/faulty/infer");
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
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());

    for (i, task) in requests.into_iter().enumerate() {
        let (status, body) = task.await.unwrap().expect("request completed");
        assert_eq!(status, 200, "{body}");
        assert_eq!(output_f32(&body, "y"), vec![2.0 * i as f32]);
    }
    let exit = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .expect("wait");
    assert_eq!(exit.code(), Some(0));
    let log: Vec<String> = lines_rx.try_iter().collect();
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
