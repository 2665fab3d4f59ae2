//! Fair instance time: one request's slow items cost another client about one item
//! deadline, however many of them that request holds (re-runs of suspect items give way to
//! fresh work, and a neighbour caught in their batch is re-run before them).

use std::time::Duration;

use crate::common;
use common::process::ServerProcess;
use common::TestServer;

const ITEM_TIMEOUT: Duration = Duration::from_millis(500);

/// One instance; items may run 500 ms, requests 3 s.
async fn one_instance(queue_delay_us: u32) -> TestServer {
    TestServer::start_faulty(
        &format!("max_batch_size = 32\nmax_queue_delay_us = {queue_delay_us}"),
        "instances = 1\ntimeout_ms = 500\nrequest_timeout_ms = 3000",
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_looping_items_cost_another_client_one_deadline_at_most() {
    let server = one_instance(0).await;
    let looping = server.spawn_faulty(&[-2.0; 16]);
    // Arrives while the 16 run their first (batch) call.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, first) = server.spawn_faulty(&[1.0]).await.unwrap();
    assert_eq!(status, 200);
    // Arrives while the 16 are being re-run one by one.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let (status, second) = server.spawn_faulty(&[2.0]).await.unwrap();
    assert_eq!(status, 200);
    let (status, held) = looping.await.unwrap();
    eprintln!("innocent clients: {first:?} and {second:?}; the 16 looping items: {status} after {held:?}");
    // The old order served them after every re-run: 2.98 s, at the request's deadline.
    for took in [first, second] {
        assert!(
            took < ITEM_TIMEOUT + Duration::from_millis(400),
            "answered after {took:?}"
        );
    }
    assert!(
        held < Duration::from_millis(3000 + 600),
        "the looping request took {held:?}"
    );
    let (status, _) = server.spawn_faulty(&[3.0]).await.unwrap();
    assert_eq!(status, 200);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_neighbour_of_many_looping_items_is_re_run_before_them() {
    // A 50 ms gathering window puts both requests in one batch.
    let server = one_instance(50_000).await;
    let looping = server.spawn_faulty(&[-2.0; 16]);
    tokio::time::sleep(Duration::from_millis(10)).await;
    let (status, took) = server.spawn_faulty(&[1.0]).await.unwrap();
    eprintln!("a neighbour of 16 looping items: {status} after {took:?}");
    assert_eq!(status, 200);
    // The batch's deadline, then its own short re-run; not after 16 more deadlines.
    assert!(
        took < 2 * ITEM_TIMEOUT + Duration::from_millis(300),
        "answered after {took:?}"
    );
    looping.await.unwrap();
    server.stop().await;
}

/// A lone request on an idle model runs on the thread that decoded it (the idle path):
/// three of them spinning to their call limit at once, on a runtime of two threads, leave
/// the edge answering at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lone_slow_calls_on_an_idle_model_do_not_stall_the_edge() {
    let server = TestServer::start_faulty(
        "max_batch_size = 8\nmax_queue_delay_us = 0",
        "instances = 3\ntimeout_ms = 1500\nrequest_timeout_ms = 3000",
    )
    .await;
    let spinning: Vec<_> = (0..3).map(|_| server.spawn_faulty(&[-2.0])).collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    for _ in 0..5 {
        let started = std::time::Instant::now();
        let (status, _) = server.get("/v2/health/live").await;
        assert_eq!(status, 200);
        assert!(
            started.elapsed() < Duration::from_millis(200),
            "the edge answered after {:?} while plugins spun",
            started.elapsed()
        );
    }
    for call in spinning {
        let (status, took) = call.await.unwrap();
        assert_eq!(status, 504, "after {took:?}");
    }
    server.stop().await;
}

/// On the idle path a trapped instance is replaced after the answer: the trapping item's
/// client does not wait for the replacement's `init` (800 ms here); the next request does,
/// since the model's one instance is being rebuilt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trap_on_an_idle_model_is_answered_before_its_replacement_is_built() {
    let config = common::faulty_config("max_batch_size = 8", "instances = 1\ntimeout_ms = 1000")
        + "\n[parameters]\nsleep_init_ms = 800\n";
    let repository = common::faulty_repository(&config);
    let server = TestServer::start(repository.path()).await;
    let (status, took) = server.spawn_faulty(&[-1.0]).await.unwrap();
    assert_eq!(status, 500);
    assert!(
        took < Duration::from_millis(600),
        "the trap was answered after {took:?}"
    );
    let (status, took) = server.spawn_faulty(&[1.0]).await.unwrap();
    assert_eq!(status, 200, "after {took:?}");
    let stats = common::stats(&server, "faulty").await;
    assert_eq!(stats["instance_replacements"], 1, "{stats}");
    assert_eq!(stats["instances_live"], 1, "{stats}");
    server.stop().await;
}

/// On the idle path a call parked in a host call (a 3 s WASI sleep) has no epoch to stop
/// it: the server runtime's timer ends it at its deadline, driven by the runtime thread
/// the path leaves free, which meanwhile serves the edge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_call_parked_in_a_host_call_ends_at_its_deadline() {
    let server = TestServer::start_faulty("max_batch_size = 8", "instances = 1\ntimeout_ms = 300").await;
    let sleeper = server.spawn_faulty(&[-9.0]);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = std::time::Instant::now();
    let (status, _) = server.get("/v2/health/live").await;
    assert_eq!(status, 200);
    assert!(
        started.elapsed() < Duration::from_millis(150),
        "{:?}",
        started.elapsed()
    );
    let (status, took) = sleeper.await.unwrap();
    assert_eq!(status, 504);
    assert!(
        took < Duration::from_millis(300 + 400),
        "the sleeper answered after {took:?}"
    );
    let (status, _) = server.spawn_faulty(&[1.0]).await.unwrap();
    assert_eq!(status, 200);
    server.stop().await;
}

/// The idle path runs a lone request's calls on a runtime thread of the real binary (its
/// own runtime, two threads, both asleep when the request comes): a call spinning to its
/// limit, one parked in a host call, and one computing a graph through `wasi:nn` each
/// hand that thread's place to the other thread, so the edge keeps answering and every
/// call ends at its deadline. (Before, the other thread slept on while the timer and the
/// sockets waited for the busy one: the edge stalled for the whole call, and a sleeping
/// call stopped the server for good.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lone_calls_on_a_runtime_thread_of_an_idle_server_leave_it_answering() {
    let repository = crate::nn::faulty_with_graphs("timeout_ms = 800", "", &[("heavy", crate::nn::heavy())]);
    let server = ServerProcess::spawn(repository.path(), &[]).await;
    // -2 spins in wasm code, -9 sleeps in a WASI call, -40 computes a heavy graph.
    for value in [-2.0, -9.0, -40.0] {
        // Both runtime threads idle, one asleep in the timer and sockets.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let body = serde_json::to_vec(&common::items_request(&[value])).unwrap();
        let call = {
            let (client, url) = (reqwest::Client::new(), server.url("/v2/models/faulty/infer"));
            tokio::spawn(async move {
                let started = std::time::Instant::now();
                let response = client
                    .post(url)
                    .header("content-type", "application/json")
                    .body(body)
                    .timeout(Duration::from_secs(10))
                    .send()
                    .await;
                (response.map(|r| r.status().as_u16()), started.elapsed())
            })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        let started = std::time::Instant::now();
        let live = reqwest::Client::new()
            .get(server.url("/v2/health/live"))
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .map(|r| r.status().as_u16());
        let waited = started.elapsed();
        assert_eq!(live.ok(), Some(200), "x = {value}");
        assert!(
            waited < Duration::from_millis(150),
            "x = {value}: the edge answered after {waited:?}"
        );
        let (status, took) = call.await.unwrap();
        assert_eq!(status.ok(), Some(504), "x = {value}, after {took:?}");
        assert!(
            took < Duration::from_millis(800 + 400),
            "x = {value}: answered after {took:?}"
        );
    }
}
