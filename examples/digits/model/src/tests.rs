//! Checks the forward pass against scikit-learn's answers in `tests/data/digits/`.

use super::*;

fn repo_path(relative: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..").join(relative)
}

fn weights() -> Weights {
    Weights::from_dir(repo_path("examples/models/digits")).expect("weights")
}

/// The numbers of the JSON array that follows `"key":` in `line` (the test data is
/// machine-written JSON, so this needs no JSON parser).
fn numbers_after(line: &str, key: &str) -> Vec<f64> {
    let start = line.find(&format!("\"{key}\":[")).expect(key) + key.len() + 4;
    let end = start + line[start..].find(']').expect("]");
    line[start..end]
        .split(',')
        .map(|s| s.trim().parse().expect("number"))
        .collect()
}

fn integer_after(line: &str, key: &str) -> i64 {
    let start = line.find(&format!("\"{key}\":")).expect(key) + key.len() + 3;
    let digits: String = line[start..].chars().take_while(char::is_ascii_digit).collect();
    digits.parse().expect("integer")
}

#[test]
fn matches_scikit_learn_on_the_test_set() {
    let requests =
        std::fs::read_to_string(repo_path("tests/data/digits/test_requests.jsonl")).expect("test_requests.jsonl");
    let oracle = std::fs::read_to_string(repo_path("tests/data/digits/test_oracle.jsonl")).expect("test_oracle.jsonl");
    let x: Vec<f32> = requests
        .lines()
        .flat_map(|l| numbers_after(l, "data"))
        .map(|v| v as f32)
        .collect();
    let n = requests.lines().count();
    assert_eq!(n, 450);

    let mut proba = vec![0.0; n * CLASSES];
    let mut labels = vec![0; n];
    forward(&weights(), &x, n, &mut proba, &mut labels);

    for (i, line) in oracle.lines().enumerate() {
        assert_eq!(labels[i], integer_after(line, "predict"), "row {i}");
        let expected = numbers_after(line, "predict_proba");
        for (j, &e) in expected.iter().enumerate() {
            let got = proba[i * CLASSES + j] as f64;
            assert!((got - e).abs() <= 1e-5, "row {i} class {j}: {got} vs {e}");
        }
    }
}

#[test]
fn wrong_sizes_are_rejected() {
    let err = Weights::from_bytes(&[0; 16], &[0; 256], &[0; 2560], &[0; 40]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "W0.f32: expected 16384 bytes (4096 little-endian f32), got 16"
    );
    assert!(Weights::from_dir("/nonexistent")
        .unwrap_err()
        .to_string()
        .starts_with("cannot read"));
}

#[test]
fn softmax_is_stable_and_breaks_ties_first() {
    let mut p = [0.0; CLASSES];
    let z = [1000.0, 1000.0, -1000.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
    assert_eq!(softmax(&z, &mut p), 0);
    assert!((p[0] - 0.5).abs() < 1e-6 && (p[1] - 0.5).abs() < 1e-6);
    assert!(p.iter().all(|v| v.is_finite()));
}
