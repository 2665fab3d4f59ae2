//! End to end: the digits example served over REST, checked against scikit-learn's own
//! answers, and every way a client can get a request wrong.

use crate::common;

use common::{output, output_f32, request, TestServer};
use serde_json::{json, Value};

use crate::common::DIGITS_INFER;

pub(crate) struct Case {
    pub(crate) pixels: Vec<f32>,
    pub(crate) predict: i64,
    pub(crate) proba: Vec<f32>,
}

pub(crate) fn cases() -> Vec<Case> {
    let dir = common::root().join("tests/data/digits");
    let requests = std::fs::read_to_string(dir.join("test_requests.jsonl")).expect("test_requests.jsonl");
    let oracle = std::fs::read_to_string(dir.join("test_oracle.jsonl")).expect("test_oracle.jsonl");
    requests
        .lines()
        .zip(oracle.lines())
        .map(|(r, o)| {
            let r: Value = serde_json::from_str(r).expect("request line");
            let o: Value = serde_json::from_str(o).expect("oracle line");
            assert_eq!(r["id"], o["id"]);
            let floats = |v: &Value| {
                v.as_array()
                    .expect("array")
                    .iter()
                    .map(|x| x.as_f64().expect("f") as f32)
                    .collect()
            };
            Case {
                pixels: floats(&r["inputs"][0]["data"]),
                predict: o["predict"].as_i64().expect("predict"),
                proba: floats(&o["predict_proba"]),
            }
        })
        .collect()
}

pub(crate) fn assert_matches(case: &Case, label: i64, proba: &[f32], context: &str) {
    assert_eq!(label, case.predict, "{context}: label");
    assert_eq!(proba.len(), 10, "{context}: probabilities");
    for (got, want) in proba.iter().zip(&case.proba) {
        assert!((got - want).abs() <= 1e-5, "{context}: probability {got} vs {want}");
    }
}

/// Checks a batched answer's labels and probabilities against the oracle cases of its items.
pub(crate) fn assert_batch_matches(body: &Value, cases: &[Case], context: &str) {
    let labels = output(body, "label")["data"].as_array().unwrap().clone();
    let proba = output_f32(body, "probabilities");
    for (i, case) in cases.iter().enumerate() {
        let label = labels[i].as_i64().unwrap();
        assert_matches(
            case,
            label,
            &proba[i * 10..(i + 1) * 10],
            &format!("{context} item {i}"),
        );
    }
}

/// Posts the 450 oracle requests one by one to `infer`, checks each answer against the
/// oracle (labels, probabilities, shapes), and returns the answers.
pub(crate) async fn assert_oracle_one_by_one(server: &TestServer, infer: &str) -> Vec<Value> {
    let requests = std::fs::read_to_string(common::root().join("tests/data/digits/test_requests.jsonl")).unwrap();
    let mut answers = Vec::new();
    for (line, case) in requests.lines().zip(cases()) {
        let (status, body) = server.post_raw(infer, line.as_bytes().to_vec(), None).await;
        assert_eq!(status, 200, "{body}");
        let label = output(&body, "label")["data"][0].as_i64().unwrap();
        assert_matches(&case, label, &output_f32(&body, "probabilities"), line);
        assert_eq!(output(&body, "label")["shape"], json!([1, 1]));
        assert_eq!(output(&body, "probabilities")["shape"], json!([1, 10]));
        answers.push(body);
    }
    answers
}

pub(crate) fn repository() -> std::path::PathBuf {
    common::examples()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_450_json_requests_match_the_oracle() {
    let server = TestServer::start(&repository()).await;
    assert_oracle_one_by_one(&server, DIGITS_INFER).await;
    server.stop().await;
}

/// Encodes a request with the binary tensor data extension, asking for binary outputs.
fn binary_request(pixels: &[f32], rows: usize) -> (Vec<u8>, usize) {
    let header = json!({
        "inputs": [{"name": "input-0", "datatype": "FP32", "shape": [rows, 64],
                    "parameters": {"binary_data_size": pixels.len() * 4}}],
        "outputs": [{"name": "probabilities", "parameters": {"binary_data": true}},
                    {"name": "label", "parameters": {"binary_data": true}}]
    });
    let mut body = serde_json::to_vec(&header).unwrap();
    let json_len = body.len();
    body.extend(pixels.iter().flat_map(|p| p.to_le_bytes()));
    (body, json_len)
}

/// Splits a binary-extension response into its JSON and each output's bytes.
fn binary_outputs(header: &Value, tail: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut at = 0;
    header["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            let size = o["parameters"]["binary_data_size"].as_u64().expect("binary_data_size") as usize;
            let bytes = tail[at..at + size].to_vec();
            at += size;
            (o["name"].as_str().unwrap().to_string(), bytes)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_450_binary_requests_match_the_oracle() {
    let server = TestServer::start(&repository()).await;
    for (i, case) in cases().iter().enumerate() {
        let (body, json_len) = binary_request(&case.pixels, 1);
        let response = server
            .client
            .post(server.url(DIGITS_INFER))
            .header("Inference-Header-Content-Length", json_len)
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let header_len: usize = response.headers()["inference-header-content-length"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        let bytes = response.bytes().await.unwrap();
        let header: Value = serde_json::from_slice(&bytes[..header_len]).unwrap();
        let outputs = binary_outputs(&header, &bytes[header_len..]);
        let proba: Vec<f32> = outputs[0]
            .1
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        let label = i64::from_le_bytes(outputs[1].1[..8].try_into().unwrap());
        assert_eq!(outputs[0].0, "probabilities");
        assert_matches(case, label, &proba, &format!("binary request {i}"));
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_item_requests_in_both_shapes() {
    let server = TestServer::start(&repository()).await;
    let cases = cases();
    for chunk in cases.chunks(8).take(10) {
        let pixels: Vec<f32> = chunk.iter().flat_map(|c| c.pixels.clone()).collect();
        for shape in [vec![chunk.len() as u64, 64], vec![chunk.len() as u64, 8, 8]] {
            let (status, body) = server
                .post_json(DIGITS_INFER, &request("input-0", "FP32", &shape, json!(pixels)))
                .await;
            assert_eq!(status, 200, "{body}");
            let labels = output(&body, "label")["data"].as_array().unwrap().clone();
            let proba = output_f32(&body, "probabilities");
            assert_eq!(output(&body, "probabilities")["shape"], json!([chunk.len(), 10]));
            for (i, case) in chunk.iter().enumerate() {
                assert_matches(
                    case,
                    labels[i].as_i64().unwrap(),
                    &proba[i * 10..(i + 1) * 10],
                    &format!("{shape:?} item {i}"),
                );
            }
        }
    }
    // Binary, eight items at once.
    let pixels: Vec<f32> = cases[..8].iter().flat_map(|c| c.pixels.clone()).collect();
    let (body, json_len) = binary_request(&pixels, 8);
    let (status, _) = server.post_raw(DIGITS_INFER, body, Some(json_len)).await;
    assert_eq!(status, 200);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_invalid_item_fails_alone() {
    let server = TestServer::start(&repository()).await;
    let cases = cases();
    let mut pixels: Vec<f32> = cases[..4].iter().flat_map(|c| c.pixels.clone()).collect();
    pixels[2 * 64 + 5] = 99.0;
    let (status, body) = server
        .post_json(DIGITS_INFER, &request("input-0", "FP32", &[4, 64], json!(pixels)))
        .await;
    assert_eq!(status, 207, "{body}");
    // A summary under `error` for clients that look for one (tritonclient).
    assert_eq!(
        body["error"], "1 of 4 items failed; each item's status is in \"results\"",
        "{body}"
    );
    let results = body["results"].as_array().unwrap();
    assert_eq!(results.len(), 4);
    assert_eq!(body["model_name"], "digits");
    for (i, result) in results.iter().enumerate() {
        if i == 2 {
            assert_eq!(result["status"], 400, "{result}");
            let error = result["error"].as_str().unwrap();
            assert!(error.contains("input-0[5]") && error.contains("99"), "{error}");
        } else {
            assert_eq!(result["status"], 200, "{result}");
            let label = output(result, "label")["data"][0].as_i64().unwrap();
            assert_eq!(output(result, "label")["shape"], json!([1, 1]));
            assert_matches(&cases[i], label, &output_f32(result, "probabilities"), "neighbour");
        }
    }
    let (status, body) = server
        .post_json(
            DIGITS_INFER,
            &request("input-0", "FP32", &[1, 64], json!(pixels[2 * 64..3 * 64])),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"].as_str().unwrap().contains("pixel value 99"), "{body}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_metadata() {
    let server = TestServer::start(&repository()).await;
    // The protocol's bodies, which V2 clients (KServe's) read.
    assert_eq!(server.get("/v2/health/live").await, (200, json!({"live": true})));
    assert_eq!(server.get("/v2/health/ready").await, (200, json!({"ready": true})));
    assert_eq!(
        server.get("/v2/models/digits/ready").await,
        (200, json!({"name": "digits", "ready": true}))
    );
    // Unknown routes answer a V2 error body too.
    let (status, body) = server.get("/v2/no/such/route").await;
    assert_eq!(status, 404);
    assert_eq!(body["error"], "no route GET /v2/no/such/route");
    let (status, meta) = server.get("/v2").await;
    assert_eq!(status, 200);
    assert_eq!(meta["name"], "tensorplug");
    assert!(meta["extensions"]
        .as_array()
        .unwrap()
        .contains(&json!("binary_tensor_data")));

    let (status, model) = server.get("/v2/models/digits").await;
    assert_eq!(status, 200);
    assert_eq!(model["name"], "digits");
    assert_eq!(model["versions"], json!(["1"]));
    assert_eq!(model["platform"], "tensorplug_wasm");
    assert_eq!(
        model["inputs"],
        json!([{"name": "input-0", "datatype": "FP32", "shape": [-1, 64]}])
    );
    assert_eq!(
        model["outputs"][0],
        json!({"name": "probabilities", "datatype": "FP32", "shape": [-1, 10]})
    );
    assert_eq!(server.get("/v2/models/digits/versions/1").await.0, 200);
    assert_eq!(server.get("/v2/models/digits/ready").await.0, 200);
    assert_eq!(server.get("/v2/models/digits/versions/1/ready").await.0, 200);

    // One successful item, then the counters operators scrape.
    let pixels = vec![0.0f32; 64];
    let (status, _) = server
        .post_json(DIGITS_INFER, &request("input-0", "FP32", &[1, 64], json!(pixels)))
        .await;
    assert_eq!(status, 200);
    let metrics = crate::common::metrics::scrape(&server).await;
    let digits = [("model", "digits"), ("version", "1")];
    assert_eq!(metrics.value("tensorplug_items_succeeded_total", &digits), 1.0);
    assert_eq!(metrics.value("tensorplug_batches_total", &digits), 1.0);
    assert_eq!(metrics.value("tensorplug_model_ready", &[("model", "digits")]), 1.0);

    let (status, body) = server.get("/v2/models/nope").await;
    assert_eq!(status, 404);
    assert!(body["error"].as_str().unwrap().contains("nope"));
    assert_eq!(server.get("/v2/models/digits/versions/7").await.0, 404);
    assert_eq!(server.get("/v2/models/digits/versions/7/ready").await.0, 404);
    assert_eq!(server.post_json("/v2/models/nope/infer", &json!({})).await.0, 404);
    let pixels = vec![0.0f32; 64];
    let (status, _) = server
        .post_json(
            "/v2/models/digits/versions/2/infer",
            &request("input-0", "FP32", &[1, 64], json!(pixels)),
        )
        .await;
    assert_eq!(status, 404);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_clear_errors_and_the_server_keeps_serving() {
    let server = TestServer::start(&repository()).await;
    let pixels = json!(vec![1.0f32; 64]);
    let bad: Vec<(Vec<u8>, &str)> = vec![
        (b"{not json".to_vec(), "JSON"),
        (
            serde_json::to_vec(&request("input-1", "FP32", &[1, 64], pixels.clone())).unwrap(),
            "input-1",
        ),
        (
            serde_json::to_vec(&request("input-0", "INT32", &[1, 64], json!(vec![1; 64]))).unwrap(),
            "INT32",
        ),
        (
            serde_json::to_vec(&request("input-0", "FP32", &[1, 63], pixels.clone())).unwrap(),
            "63",
        ),
        (
            serde_json::to_vec(&request("input-0", "FP32", &[1, 8, 7], json!(vec![1.0; 56]))).unwrap(),
            "[1, 8, 7]",
        ),
        (
            serde_json::to_vec(&request("input-0", "FP33", &[1, 64], pixels.clone())).unwrap(),
            "FP33",
        ),
        (serde_json::to_vec(&json!({"inputs": []})).unwrap(), "input-0"),
    ];
    for (body, needle) in bad {
        let (status, answer) = server.post_raw(DIGITS_INFER, body, None).await;
        assert_eq!(status, 400, "{answer}");
        let message = answer["error"]
            .as_str()
            .unwrap_or_else(|| panic!("no error in {answer}"));
        assert!(message.contains(needle), "{message:?} should mention {needle:?}");
    }
    // Oversized body, declared: refused from the headers alone, before any body byte.
    let answer = raw_post_headers(&server, DIGITS_INFER, 65 * 1024 * 1024).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("larger than the limit of 67108864 bytes"), "{answer}");
    // Header length past the body.
    let (status, _) = server.post_raw(DIGITS_INFER, b"{}".to_vec(), Some(10)).await;
    assert_eq!(status, 400);

    let (status, body) = server
        .post_json(DIGITS_INFER, &request("input-0", "FP32", &[1, 64], pixels))
        .await;
    assert_eq!(status, 200, "{body}");
    server.stop().await;
}

/// Sends only the headers of a POST declaring `content_length` bytes and returns what the
/// server answers (a client like curl waits for this with `Expect: 100-continue`).
async fn raw_post_headers(server: &TestServer, path: &str, content_length: usize) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(server.address).await.unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n\
         content-length: {content_length}\r\nconnection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer).into_owned()
}

/// The pipeline stands on its own: a loaded model runs items with no server, no batcher
/// and no async runtime (what `tensorplug check` and an in-process client build on).
#[test]
fn a_loaded_model_runs_without_a_server_or_an_async_runtime() {
    use tensorplug::model::tensor::{DataType, Tensor};
    use tensorplug::pipeline::LoadedModel;
    use tensorplug::runtime::Runtime;

    let runtime = Runtime::new(None).expect("runtime");
    let mut loaded = LoadedModel::load(&runtime, &repository().join("digits"), |_| 1).expect("the digits model loads");
    let image = |pixels: &[f32]| {
        vec![Tensor {
            name: "input-0".into(),
            datatype: DataType::Fp32,
            shape: vec![64],
            data: pixels.iter().flat_map(|p| p.to_le_bytes()).collect(),
        }]
    };
    let cases = cases();
    let mut bad = cases[1].pixels.clone();
    bad[5] = 99.0;
    let items = vec![image(&cases[0].pixels), image(&bad), image(&cases[2].pixels)];
    let outcomes = loaded.instances[0].run(items, &tensorplug::pipeline::Everyone);
    assert_eq!(outcomes.len(), 3);
    for (outcome, case) in [(&outcomes[0], &cases[0]), (&outcomes[2], &cases[2])] {
        let outputs = outcome.as_ref().expect("a good image succeeds");
        let label = outputs.iter().find(|t| t.name == "label").expect("label");
        let proba = outputs
            .iter()
            .find(|t| t.name == "probabilities")
            .expect("probabilities");
        let label = i64::from_le_bytes(label.data[..8].try_into().unwrap());
        let proba: Vec<f32> = proba
            .data
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_matches(case, label, &proba, "in-process");
    }
    let error = outcomes[1].as_ref().expect_err("the bad image fails alone");
    assert_eq!(error.status, 400, "{}", error.message);
}
