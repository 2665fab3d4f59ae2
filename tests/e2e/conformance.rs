//! Conformance with the unmodified V2 clients from PyPI: `tests/conformance/conformance.py`
//! drives the real server (REST and gRPC on loopback, serving digits and the faulty model)
//! with `tritonclient.http`, `tritonclient.grpc` and kserve's `InferenceRESTClient`, and
//! checks their answers against scikit-learn's. The clients live in a virtualenv in the
//! target folder that `scripts/python-env.sh` builds; the first run downloads them. No
//! Python 3 (with venv and pip) or no PyPI is a failure, not a skip.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::python::{python, run_bounded, shown};
use crate::common::{self, TestServer};

/// A repository holding copies of the digits example and the faulty test model.
fn repository() -> tempfile::TempDir {
    let repository = tempfile::tempdir().expect("temp dir");
    for (from, name) in [("examples/models/digits", "digits"), ("tests/models/faulty", "faulty")] {
        let from = common::root().join(from);
        let to = repository.path().join(name);
        std::fs::create_dir(&to).expect("model folder");
        for entry in std::fs::read_dir(&from).expect("model folder to copy") {
            let path = entry.expect("entry").path();
            if path.is_file() {
                std::fs::copy(&path, to.join(path.file_name().expect("file name"))).expect("copy a model file");
            }
        }
    }
    common::require_plugins(repository.path());
    repository
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_unmodified_python_clients_from_pypi_agree() {
    let root = common::root();
    let started = Instant::now();
    let python = python().await;
    println!("virtualenv ready in {:?}: {}", started.elapsed(), python.display());

    let repository = repository();
    let server = TestServer::start_with_grpc(common::serve_config(repository.path())).await;
    let grpc = server.grpc_address();
    let started = Instant::now();
    let mut conformance = Command::new(&python);
    conformance
        .arg(root.join("tests/conformance/conformance.py"))
        .args(["--http", &server.address.to_string(), "--grpc", &grpc.to_string()])
        .arg("--data")
        .arg(root.join("tests/data/digits"))
        .env("PYTHONUNBUFFERED", "1")
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("no_proxy", "127.0.0.1,localhost");
    let output = run_bounded(
        "tests/conformance/conformance.py",
        conformance,
        Duration::from_secs(300),
    )
    .await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.lines().any(|l| l == "conformance: every check passed"),
        "the Python clients disagree with the server\n{}",
        shown(&output)
    );
    println!("conformance checks passed in {:?}:\n{stdout}", started.elapsed());
    server.stop().await;
}
