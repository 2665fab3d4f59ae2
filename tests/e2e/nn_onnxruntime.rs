//! `wasi:nn` on ONNX Runtime (`backend = "onnxruntime"` in `[graphs]`): the digits graph
//! against scikit-learn's answers, and the limits tests of `nn` again on this backend
//! (deadline, an output larger than the instance). They need the library
//! (`common::onnx::onnxruntime_library`: skipped without it, failed if
//! `TENSORPLUG_REQUIRE_ONNXRUNTIME=1`). Without a library, a model that asks for it fails
//! its load with the reason: that one needs none.

use crate::common;
use crate::digits::{assert_oracle_one_by_one, cases, repository as examples};
use crate::nn::digits_onnx_copy;

use common::process::ServerProcess;
use common::TestServer;

/// Whether the library is there; named for this process's graph loads.
fn onnxruntime() -> bool {
    match common::onnx::onnxruntime_library() {
        Some(path) => {
            tensorplug::runtime::nn::set_onnxruntime_library(path);
            true
        }
        None => false,
    }
}

const ON_ONNXRUNTIME: &str = r#"digits = { file = "digits.onnx", backend = "onnxruntime" }"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn digits_onnx_on_onnxruntime_answers_the_oracle_one_by_one_and_batched() {
    if !onnxruntime() {
        return;
    }
    common::require_plugins(&examples());
    let repository = tempfile::tempdir().unwrap();
    digits_onnx_copy(repository.path(), "digits-ort", ON_ONNXRUNTIME);
    let server = TestServer::start(repository.path()).await;
    let infer = "/v2/models/digits-ort/infer";
    assert_oracle_one_by_one(&server, infer).await;
    crate::nn::assert_batches_of_32_match(&server, infer, &cases(), "batch on onnxruntime").await;
    // Its graph memory: the file, and one session or more (twice the weights each).
    let graph_bytes = common::stats(&server, "digits-ort").await["graph_bytes"]
        .as_u64()
        .unwrap();
    let file_bytes = std::fs::metadata(examples().join("digits-onnx/digits.onnx"))
        .unwrap()
        .len();
    assert!(graph_bytes > 2 * file_bytes, "{graph_bytes} vs {file_bytes}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_heavy_compute_on_onnxruntime_is_stopped_at_its_deadline_and_its_neighbours_answered() {
    if onnxruntime() {
        crate::nn::heavy_compute_is_stopped_at_its_deadline(Some("onnxruntime")).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_output_larger_than_the_instance_on_onnxruntime_is_the_items_error() {
    if onnxruntime() {
        crate::nn::output_larger_than_the_instance_is_the_items_error(Some("onnxruntime")).await;
    }
}

/// A graph's `threads` reaches its ONNX Runtime session in the server: the threads ONNX
/// Runtime makes while the graph loads (on the graph-load thread, whose name they take)
/// are `threads - 1` more than with the default of one thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graphs_threads_reach_its_onnxruntime_session_in_the_server() {
    let Some(library) = common::onnx::onnxruntime_library() else {
        return;
    };
    common::require_plugins(&examples());
    let mut made = Vec::new();
    for threads in [1, 3] {
        let repository = tempfile::tempdir().unwrap();
        let graphs = format!(r#"digits = {{ file = "digits.onnx", backend = "onnxruntime", threads = {threads} }}"#);
        digits_onnx_copy(repository.path(), "digits-ort", &graphs);
        let library = library.to_str().unwrap();
        let server = ServerProcess::spawn(repository.path(), &["--onnxruntime-lib", library]).await;
        // `tensorplug-graph`, cut to the 15 bytes a thread name keeps.
        let named = std::fs::read_dir(format!("/proc/{}/task", server.pid()))
            .unwrap()
            .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
            .filter(|comm| comm.trim_end() == "tensorplug-grap")
            .count();
        made.push(named);
    }
    println!("threads made on the graph-load thread with threads = 1, 3: {made:?}");
    assert_eq!(made[1] - made[0], 2, "{made:?}");
}

/// `tensorplug check` (the server's load) with `library` as `--onnxruntime-lib` (none:
/// neither the flag nor the variable).
fn check_with(repository: &std::path::Path, library: Option<&str>) -> (i32, String) {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_tensorplug"));
    command
        .arg("check")
        .arg(repository)
        .arg("--cache-dir")
        .arg(common::compile_cache())
        .env_remove("TENSORPLUG_ONNXRUNTIME_LIB");
    if let Some(library) = library {
        command.arg("--onnxruntime-lib").arg(library);
    }
    let output = command.output().expect("run tensorplug check");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

#[test]
fn without_a_loadable_library_a_model_on_onnxruntime_fails_its_load_with_the_reason() {
    common::require_plugins(&examples());
    let repository = tempfile::tempdir().unwrap();
    digits_onnx_copy(repository.path(), "on-tract", r#"digits = "digits.onnx""#);
    digits_onnx_copy(repository.path(), "on-ort", ON_ONNXRUNTIME);
    let line = |out: &str, name: &str| {
        out.lines()
            .find(|l| l.contains(&format!(" {name}:")))
            .unwrap_or_default()
            .to_string()
    };
    let (code, out) = check_with(repository.path(), None);
    assert_eq!(code, 1, "{out}");
    assert!(line(&out, "on-tract").starts_with("ok"), "{out}");
    let broken = line(&out, "on-ort");
    assert!(
        broken.starts_with("error") && broken.contains("--onnxruntime-lib"),
        "{out}"
    );
    let (code, out) = check_with(repository.path(), Some("/nonexistent/libonnxruntime.so"));
    assert_eq!(code, 1, "{out}");
    assert!(line(&out, "on-tract").starts_with("ok"), "{out}");
    let broken = line(&out, "on-ort");
    assert!(
        broken.contains("cannot load ONNX Runtime from /nonexistent/libonnxruntime.so"),
        "{out}"
    );
}
