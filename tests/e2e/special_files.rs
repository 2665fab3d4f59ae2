//! Only regular files are read from a model folder: a FIFO, a device or a socket named as a
//! plugin, a graph or `model.toml` fails its model's load at once with the reason, and one
//! a plugin opens through WASI is refused (fault codes -60 and -61 of tests/plugins/faulty)
//! within its call's deadline, without holding the instance.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common;
use common::TestServer;

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path; mkfifo only creates a file.
    let made = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
    assert_eq!(made, 0, "mkfifo {}", path.display());
}

/// A character device node like /dev/zero at `path`, if this process may make one.
fn mknod_zero(path: &Path) -> bool {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path; mknod only creates a file (1, 5 is /dev/zero).
    unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o600, libc::makedev(1, 5)) == 0 }
}

/// A copy of the faulty model in `repository/name`, with `graphs` added to its config.
fn faulty_model(repository: &Path, name: &str, graphs: &str) -> std::path::PathBuf {
    let dir = repository.join(name);
    std::fs::create_dir(&dir).unwrap();
    std::fs::copy(
        common::root().join("tests/models/faulty/predict.wasm"),
        dir.join("predict.wasm"),
    )
    .unwrap();
    let config = common::faulty_config("max_batch_size = 1", "instances = 1");
    std::fs::write(dir.join("model.toml"), format!("{config}\n{graphs}")).unwrap();
    dir
}

fn row<'a>(index: &'a Value, name: &str) -> &'a Value {
    index
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {index}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn special_files_fail_their_models_load_at_once_and_others_serve() {
    let repository = tempfile::tempdir().unwrap();
    let root = repository.path();
    faulty_model(root, "faulty", "");
    let graph = "[graphs]\ndigits = \"graph.onnx\"\n";
    mkfifo(&faulty_model(root, "fifo-graph", graph).join("graph.onnx"));
    let fifo_plugin = faulty_model(root, "fifo-plugin", "");
    std::fs::remove_file(fifo_plugin.join("predict.wasm")).unwrap();
    mkfifo(&fifo_plugin.join("predict.wasm"));
    let fifo_config = faulty_model(root, "fifo-config", "");
    std::fs::remove_file(fifo_config.join("model.toml")).unwrap();
    mkfifo(&fifo_config.join("model.toml"));
    // A plugin file that is /dev/zero: the host used to read it until memory ran out.
    let zero_plugin = faulty_model(root, "zero-plugin", "");
    std::fs::remove_file(zero_plugin.join("predict.wasm")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", zero_plugin.join("predict.wasm")).unwrap();
    // A graph that is a character device (graphs must resolve inside the folder, so a
    // device node, which needs the right to make one): the host used to read 256 MiB.
    let device_graph = faulty_model(root, "device-graph", graph);
    let device = mknod_zero(&device_graph.join("graph.onnx"));
    if !device {
        std::fs::remove_dir_all(&device_graph).unwrap();
        eprintln!("note: cannot make a device node here; the device graph is not tried");
    }

    let before = tensorplug::model::files::special_files_refused().0 as f64;
    let started = Instant::now();
    let server = TestServer::start(root).await;
    let loaded_in = started.elapsed();
    let index = common::index(&server).await;
    // Without the check the FIFOs hold their loads (and load slots) for good.
    assert!(loaded_in < Duration::from_secs(20), "loading took {loaded_in:?}");
    let mut refused = vec![
        ("fifo-graph", "graph.onnx", "FIFO"),
        ("fifo-plugin", "predict.wasm", "FIFO"),
        ("fifo-config", "model.toml", "FIFO"),
        ("zero-plugin", "predict.wasm", "character device"),
    ];
    if device {
        refused.push(("device-graph", "graph.onnx", "character device"));
    }
    for (name, file, kind) in &refused {
        let row = row(&index, name);
        assert_eq!(row["state"], "UNAVAILABLE", "{index}");
        let reason = row["reason"].as_str().unwrap();
        assert!(
            reason.contains(file) && reason.contains(kind) && reason.contains("regular-files-only"),
            "{name}: {reason}"
        );
    }
    assert_eq!(row(&index, "faulty")["state"], "READY", "{index}");
    let (status, body) = server.post_faulty(&[2.0]).await;
    assert_eq!(status, 200, "{body}");
    let metrics = common::metrics::scrape(&server).await;
    let host = metrics.value("tensorplug_special_files_refused_total", &[("opener", "host")]);
    assert!(host >= before + refused.len() as f64, "{host} refused");
    eprintln!(
        "special files: {} refused, all loads settled in {loaded_in:?}",
        refused.len()
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_cannot_open_a_fifo_in_its_folder() {
    let repository = common::faulty_repository(&common::faulty_config(
        "max_batch_size = 1",
        "instances = 1\ntimeout_ms = 500",
    ));
    let dir = repository.path().join("faulty");
    mkfifo(&dir.join("fifo"));
    std::os::unix::fs::symlink("fifo", dir.join("fifo-link")).unwrap();
    let server = TestServer::start(repository.path()).await;
    for code in [-60.0, -61.0] {
        let started = Instant::now();
        let (status, body) = server.post_faulty(&[code]).await;
        let took = started.elapsed();
        eprintln!("fault {code}: {status} after {took:?}");
        // Refused at the open, an item error: not a deadline, not a held instance.
        assert_eq!(status, 422, "{body}");
        let message = body["error"].as_str().unwrap();
        assert!(message.contains("denied"), "{message}");
        assert!(took < Duration::from_millis(400), "answered after {took:?}");
    }
    let (status, body) = server.post_faulty(&[3.0]).await;
    assert_eq!(status, 200, "the instance serves on: {body}");
    let metrics = common::metrics::scrape(&server).await;
    assert!(metrics.value("tensorplug_special_files_refused_total", &[("opener", "plugin")]) >= 2.0);
    server.stop().await;
}
