//! End to end: many concurrent clients share batches, and each still gets its own answer.

use crate::common;

use common::{output, output_f32, request, TestServer};
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_concurrent_clients_share_batches_and_get_their_own_answers() {
    let server = TestServer::start(&common::examples()).await;
    let dir = common::root().join("tests/data/digits");
    let requests = std::fs::read_to_string(dir.join("test_requests.jsonl")).unwrap();
    let oracle = std::fs::read_to_string(dir.join("test_oracle.jsonl")).unwrap();
    let cases: Vec<(Vec<f64>, i64, Vec<f64>)> = requests
        .lines()
        .zip(oracle.lines())
        .map(|(r, o)| {
            let r: Value = serde_json::from_str(r).unwrap();
            let o: Value = serde_json::from_str(o).unwrap();
            let floats = |v: &Value| {
                v.as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_f64().unwrap())
                    .collect::<Vec<_>>()
            };
            (
                floats(&r["inputs"][0]["data"]),
                o["predict"].as_i64().unwrap(),
                floats(&o["predict_proba"]),
            )
        })
        .collect();
    let cases = std::sync::Arc::new(cases);
    let before = common::stats(&server, "digits").await;

    let clients: Vec<_> = (0..64)
        .map(|client_index| {
            let (client, url, cases) = (server.client.clone(), server.url(common::DIGITS_INFER), cases.clone());
            tokio::spawn(async move {
                // Each client walks its own slice of the test set: answers differ per client.
                for round in 0..20 {
                    let (pixels, label, proba) = &cases[(client_index * 7 + round) % cases.len()];
                    let body = request("input-0", "FP32", &[1, 64], json!(pixels));
                    let r = client.post(&url).json(&body).send().await.unwrap();
                    assert_eq!(r.status(), 200);
                    let answer: Value = r.json().await.unwrap();
                    assert_eq!(output(&answer, "label")["data"][0].as_i64().unwrap(), *label);
                    for (got, want) in output_f32(&answer, "probabilities").iter().zip(proba) {
                        assert!(
                            (*got as f64 - want).abs() <= 1e-5,
                            "client {client_index}: {got} vs {want}"
                        );
                    }
                }
            })
        })
        .collect();
    for client in clients {
        client.await.unwrap();
    }

    let after = common::stats(&server, "digits").await;
    let delta = |key: &str| after[key].as_u64().unwrap() - before[key].as_u64().unwrap();
    let (items, batches) = (delta("items"), delta("batches"));
    assert_eq!(items, 64 * 20, "{after}");
    assert!(
        batches < items,
        "no batch held more than one item: {batches} batches for {items} items"
    );
    eprintln!(
        "64 clients: {items} items in {batches} batches (mean {:.1})",
        items as f64 / batches as f64
    );
    server.stop().await;
}
