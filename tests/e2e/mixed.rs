//! A model whose three stages come from three languages (examples/models/digits-mixed): a C
//! preprocess, a Python predict running the digits ONNX graph through wasi:nn, and a
//! JavaScript postprocess. It answers scikit-learn's oracle, and each plugin's own refusal
//! fails only its item, in one batch, with that plugin's status and words.

use crate::common;
use crate::digits::{assert_matches, assert_oracle_one_by_one, cases};
use crate::languages::repository_of;

use common::{output, output_f32, request, TestServer};
use serde_json::json;

const INFER: &str = "/v2/models/digits-mixed/infer";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_three_language_pipeline_matches_the_oracle_on_all_450_requests() {
    let repository = repository_of(&common::examples().join("digits-mixed"));
    let server = TestServer::start(repository.path()).await;
    assert_oracle_one_by_one(&server, INFER).await;
    let (status, meta) = server.get("/v2/models/digits-mixed").await;
    assert_eq!(status, 200, "{meta}");
    assert_eq!(meta["parameters"]["labels"], "0,1,2,3,4,5,6,7,8,9", "{meta}");
    assert!(
        meta["parameters"]["description"].as_str().unwrap().contains("Python"),
        "{meta}"
    );
    server.stop().await;
}

/// One batch of five: a pixel out of range (the C preprocess's 400), a blank image (the
/// Python predict's 422), an image the model is unsure of (the JavaScript postprocess's
/// 422 under `min_confidence`), and two good images that get the oracle's answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_language_refuses_its_own_item_alone() {
    let repository = repository_of(&common::examples().join("digits-mixed"));
    let toml = repository.path().join("digits-mixed/model.toml");
    let config = std::fs::read_to_string(&toml).unwrap();
    assert!(config.contains("min_confidence = 0 "), "{config}");
    std::fs::write(&toml, config.replace("min_confidence = 0 ", "min_confidence = 0.9 ")).unwrap();
    let server = TestServer::start(repository.path()).await;

    let cases = cases();
    let top = |i: usize| cases[i].proba[cases[i].predict as usize];
    let sure: Vec<usize> = (0..cases.len()).filter(|&i| top(i) > 0.99).take(4).collect();
    let unsure = (0..cases.len())
        .find(|&i| top(i) < 0.8)
        .expect("an oracle case below 0.8");
    let items = [sure[0], sure[1], sure[2], unsure, sure[3]];
    let mut pixels: Vec<f32> = items.iter().flat_map(|&i| cases[i].pixels.clone()).collect();
    pixels[64 + 10] = 17.0; // item 1: outside 0..16
    pixels[2 * 64..3 * 64].fill(0.0); // item 2: blank

    let (status, body) = server
        .post_json(INFER, &request("input-0", "FP32", &[5, 64], json!(pixels)))
        .await;
    assert_eq!(status, 207, "{body}");
    let results = body["results"].as_array().unwrap();
    let refused = [
        (1, 400, "input-0[10]: pixel value 17 is outside 0..16"),
        (2, 422, "every pixel is 0"),
        (3, 422, "not confident"),
    ];
    for (i, status, says) in refused {
        assert_eq!(results[i]["status"], status, "item {i}: {body}");
        let error = results[i]["error"].as_str().unwrap();
        assert!(error.contains(says), "item {i}: {error}");
    }
    for i in [0, 4] {
        let result = &results[i];
        assert_eq!(result["status"], 200, "{result}");
        let label = output(result, "label")["data"][0].as_i64().unwrap();
        assert_matches(
            &cases[items[i]],
            label,
            &output_f32(result, "probabilities"),
            "neighbour",
        );
    }
    server.stop().await;
}
