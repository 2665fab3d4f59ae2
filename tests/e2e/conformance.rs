//! Conformance with the unmodified V2 clients from PyPI: `tests/conformance/conformance.py`
//! drives the real server (REST and gRPC on loopback, serving digits and the faulty model)
//! with `tritonclient.http`, `tritonclient.grpc` and kserve's `InferenceRESTClient`, and
//! checks their answers against scikit-learn's. The clients live in a virtualenv in the
//! target folder that `scripts/python-env.sh` builds; the first run downloads them. No
//! Python 3 (with venv and pip) or no PyPI is a failure, not a skip.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tensorplug::app::config::ServeConfig;

use crate::common::{self, TestServer};

/// The virtualenv's folder, where `scripts/python-env.sh` puts it by default: in cargo's
/// target folder (unless `TENSORPLUG_PYTHON_ENV` says otherwise).
fn python_env() -> PathBuf {
    match std::env::var_os("TENSORPLUG_PYTHON_ENV") {
        Some(folder) => PathBuf::from(folder),
        None => Path::new(env!("CARGO_TARGET_TMPDIR"))
            .parent()
            .expect("the target folder holds tmp/")
            .join("python-env"),
    }
}

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

/// Runs `command` (stdin closed, output captured) on the blocking pool; past `limit` its
/// whole process group is killed and the test fails.
async fn run_bounded(what: &'static str, mut command: Command, limit: Duration) -> Output {
    use std::os::unix::process::CommandExt;
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    tokio::task::spawn_blocking(move || {
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("{what}: could not start {command:?}: {e}"));
        let group = format!("-{}", child.id());
        let (done, finished) = mpsc::channel::<()>();
        let watchdog = std::thread::spawn(move || {
            let timed_out = finished.recv_timeout(limit) == Err(mpsc::RecvTimeoutError::Timeout);
            if timed_out {
                let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
            }
            timed_out
        });
        let output = child.wait_with_output().expect("wait for the child");
        drop(done);
        let timed_out = watchdog.join().expect("watchdog");
        assert!(
            !timed_out,
            "{what} took longer than {limit:?} and was killed\n{}",
            shown(&output)
        );
        output
    })
    .await
    .expect("blocking task")
}

fn shown(output: &Output) -> String {
    format!(
        "exit: {}\n--- stdout ---\n{}--- stderr ---\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_unmodified_python_clients_from_pypi_agree() {
    let root = common::root();
    let started = Instant::now();
    let mut setup = Command::new("bash");
    setup
        .arg(root.join("scripts/python-env.sh"))
        .env("TENSORPLUG_PYTHON_ENV", python_env());
    let output = run_bounded("scripts/python-env.sh", setup, Duration::from_secs(900)).await;
    assert!(
        output.status.success(),
        "scripts/python-env.sh could not build the conformance test's virtualenv (it needs python3 with venv \
         and pip, and PyPI)\n{}",
        shown(&output)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let python = PathBuf::from(stdout.lines().last().expect("the virtualenv's python").trim());
    assert!(
        python.is_file(),
        "{} is not a file\n{}",
        python.display(),
        shown(&output)
    );
    println!("virtualenv ready in {:?}: {}", started.elapsed(), python.display());

    let repository = repository();
    let server = TestServer::start_with_grpc(ServeConfig::for_repository(repository.path())).await;
    let grpc = server.grpc_address.expect("gRPC address");
    let started = Instant::now();
    let mut conformance = Command::new(&python);
    conformance
        .arg(root.join("tests/conformance/conformance.py"))
        .args(["--http", &server.address.to_string(), "--grpc", &grpc.to_string()])
        .arg("--data")
        .arg(root.join("tests/data/digits"))
        .env("PYTHONUNBUFFERED", "1")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("no_proxy", "127.0.0.1,localhost")
        .env_remove("PYTHONPATH")
        .env_remove("PYTHONHOME");
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
