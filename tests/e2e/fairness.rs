//! Fair instance time: one request's slow items cost another client about one item
//! deadline, however many of them that request holds (re-runs of suspect items give way to
//! fresh work, and a neighbour caught in their batch is re-run before them).

use std::time::Duration;

use crate::common;
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
