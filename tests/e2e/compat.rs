//! Plugins built against an earlier released version of the WIT package keep loading and
//! serving: the digits model with its predict stage built against
//! `tensorplug:plugin@0.1.0` (tests/fixtures/wit-0.1.0, rebuilt by
//! scripts/rebuild-wit-fixtures.sh from this repository's history) answers the oracle,
//! `check` names each stage's version, and a version this host does not know is refused
//! with the versions it serves.

use crate::common;

use std::path::Path;

use common::{TestServer, DIGITS_INFER};

use crate::check::check;
use crate::digits::assert_oracle_one_by_one;

/// The digits predict stage built against 0.1.0 (at commit 2f1c36a).
fn fixture_0_1_0() -> Vec<u8> {
    std::fs::read(common::root().join("tests/fixtures/wit-0.1.0/digits-predict.wasm")).expect("the 0.1.0 fixture")
}

/// A copy of the digits example folder under `repository` as `name`, with `predict` as
/// its predict stage (today's preprocess and postprocess).
fn digits_with_predict(repository: &Path, name: &str, predict: &[u8]) {
    let source = common::examples().join("digits");
    let dir = repository.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(&source).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dir.join(entry.file_name())).unwrap();
    }
    std::fs::write(dir.join("predict.wasm"), predict).unwrap();
    let toml = std::fs::read_to_string(dir.join("model.toml")).unwrap();
    let toml = toml.replacen("name = \"digits\"", &format!("name = \"{name}\""), 1);
    std::fs::write(dir.join("model.toml"), toml).unwrap();
}

/// `bytes` with every `tensorplug:plugin/...@0.1.0` name claiming `@0.9.0` (same length,
/// so the binary stays well-formed): a plugin built for a version this host never had.
fn claiming_0_9_0(bytes: &[u8]) -> Vec<u8> {
    let (from, to) = (b"@0.1.0", b"@0.9.0");
    let mut out = bytes.to_vec();
    let mut renamed = 0;
    for at in 0..out.len().saturating_sub(from.len()) {
        if &out[at..at + from.len()] == from && (out[..at].ends_with(b"types") || out[..at].ends_with(b"log")) {
            out[at..at + to.len()].copy_from_slice(to);
            renamed += 1;
        }
    }
    assert!(renamed > 0, "the fixture names no tensorplug:plugin interface");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_predict_stage_built_against_0_1_0_serves_the_oracle() {
    common::require_plugins(&common::examples());
    let repository = tempfile::tempdir().unwrap();
    digits_with_predict(repository.path(), "digits", &fixture_0_1_0());
    let server = TestServer::start(repository.path()).await;
    assert_oracle_one_by_one(&server, DIGITS_INFER).await;
    server.stop().await;
}

#[test]
fn check_names_each_stages_version_and_refuses_an_unknown_one() {
    common::require_plugins(&common::examples());
    let repository = tempfile::tempdir().unwrap();
    let old = fixture_0_1_0();
    digits_with_predict(repository.path(), "digits", &old);
    digits_with_predict(repository.path(), "digits-future", &claiming_0_9_0(&old));

    let (code, out) = check(repository.path());
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(
            "ok     digits: version 1: preprocess (WIT 0.2.0) -> predict (WIT 0.1.0) -> postprocess (WIT 0.2.0)"
        ),
        "{out}"
    );
    let future = out
        .lines()
        .find(|line| line.contains("digits-future"))
        .expect("a verdict on digits-future");
    assert!(future.contains("predict.wasm"), "{future}");
    assert!(
        future.contains("was built for tensorplug:plugin@0.9.0, which this host does not know; it serves 0.1.0, 0.2.0"),
        "{future}"
    );
}
