//! Plugins written in languages other than Rust, served end to end: the digits models
//! whose predict stage is C (examples/digits-c) or C++ (examples/digits-cpp), wasip1
//! reactor modules the host makes components at load, against scikit-learn's answers,
//! and an item the plugin itself rejects failing alone.

use crate::common;
use crate::digits::{assert_matches, assert_oracle_one_by_one, cases};

use common::{output, output_f32, request, TestServer};
use serde_json::json;

/// A repository holding only a copy of the model folder `from`, deleted on drop.
pub(crate) fn repository_of(from: &std::path::Path) -> tempfile::TempDir {
    let repository = tempfile::tempdir().unwrap();
    let to = repository.path().join(from.file_name().unwrap());
    std::fs::create_dir(&to).unwrap();
    for entry in std::fs::read_dir(&from).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, to.join(path.file_name().unwrap())).unwrap();
    }
    repository
}

/// Serves the model folder `model` alone and checks the 450 oracle requests, and what the
/// plugin declared at init.
pub(crate) async fn serves_the_oracle(model: &str) {
    let repository = repository_of(&common::examples().join(model));
    let server = TestServer::start(repository.path()).await;
    let answers = assert_oracle_one_by_one(&server, &format!("/v2/models/{model}/infer")).await;
    assert_eq!(answers[0]["model_name"], model);
    let (status, meta) = server.get(&format!("/v2/models/{model}")).await;
    assert_eq!(status, 200, "{meta}");
    assert_eq!(meta["parameters"]["labels"], "0,1,2,3,4,5,6,7,8,9", "{meta}");
    server.stop().await;
}

/// A batch of 4 whose item 2 is blank: it passes preprocess (every pixel is in range) and
/// the predict plugin answers it with its own 422; its neighbours get their digits.
pub(crate) async fn rejects_a_blank_item_alone(model: &str) {
    let repository = repository_of(&common::examples().join(model));
    let server = TestServer::start(repository.path()).await;
    let infer = format!("/v2/models/{model}/infer");
    let cases = cases();
    let mut pixels: Vec<f32> = cases[..4].iter().flat_map(|c| c.pixels.clone()).collect();
    pixels[2 * 64..3 * 64].fill(0.0);
    let (status, body) = server
        .post_json(&infer, &request("input-0", "FP32", &[4, 64], json!(pixels)))
        .await;
    assert_eq!(status, 207, "{body}");
    let results = body["results"].as_array().unwrap();
    assert_eq!(results.len(), 4);
    for (i, result) in results.iter().enumerate() {
        if i == 2 {
            assert_eq!(result["status"], 422, "{result}");
            let error = result["error"].as_str().unwrap();
            assert!(error.contains("every pixel is 0"), "{error}");
        } else {
            assert_eq!(result["status"], 200, "{result}");
            let label = output(result, "label")["data"][0].as_i64().unwrap();
            assert_matches(&cases[i], label, &output_f32(result, "probabilities"), "neighbour");
        }
    }
    // Alone, the blank image is the whole request's 422.
    let (status, body) = server
        .post_json(&infer, &request("input-0", "FP32", &[1, 64], json!(vec![0.0f32; 64])))
        .await;
    assert_eq!(status, 422, "{body}");
    assert!(body["error"].as_str().unwrap().contains("every pixel is 0"), "{body}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_predict_matches_the_oracle_on_all_450_requests() {
    serves_the_oracle("digits-c").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_item_the_c_plugin_rejects_fails_alone() {
    rejects_a_blank_item_alone("digits-c").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpp_predict_matches_the_oracle_on_all_450_requests() {
    serves_the_oracle("digits-cpp").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_item_the_cpp_plugin_rejects_fails_alone() {
    rejects_a_blank_item_alone("digits-cpp").await;
}
