//! End to end: the model repository changes under load — new versions, broken builds,
//! added and removed folders, the repository API — and no request fails because of it.

use crate::common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{output_f32, request, TestServer};
use serde_json::{json, Value};
use tensorplug::app::config::{ModelControl, RepositoryApi};

use crate::common::FAULTY_INFER;

/// The faulty model's model.toml at `version`, multiplying by `scale`.
fn faulty_toml(version: u32, scale: u32, extra_parameters: &str) -> String {
    format!(
        "version = \"{version}\"\n[stages]\npredict = \"predict.wasm\"\n\
         [[inputs]]\nname = \"x\"\ndatatype = \"FP32\"\nshape = [1]\n\
         [[outputs]]\nname = \"y\"\ndatatype = \"FP32\"\nshape = [1]\n\
         [batching]\nmax_batch_size = 16\nmax_queue_delay_us = 200\n\
         [limits]\ninstances = 2\n[parameters]\nscale = {scale}\n{extra_parameters}"
    )
}

/// Writes `bytes` to `path` the way deploy tools do: a temporary file, then a rename.
fn replace_file(path: &Path, bytes: &[u8]) {
    let staging = path.with_extension("staging");
    std::fs::write(&staging, bytes).unwrap();
    std::fs::rename(&staging, path).unwrap();
}

fn plugin(name: &str) -> Vec<u8> {
    std::fs::read(common::root().join("tests/models").join(name).join("predict.wasm")).expect("built plugin")
}

/// 16 clients sending `x = 1` back to back until stopped; records every answer's `y`
/// and counts anything but a 200.
struct Load {
    stop: Arc<AtomicBool>,
    failures: Arc<AtomicU64>,
    answers: Arc<Mutex<Vec<f32>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(server: &TestServer) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let failures = Arc::new(AtomicU64::new(0));
        let answers = Arc::new(Mutex::new(Vec::new()));
        let tasks = (0..16)
            .map(|_| {
                let (stop, failures, answers) = (stop.clone(), failures.clone(), answers.clone());
                let client = server.client.clone();
                let url = server.url(FAULTY_INFER);
                tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        let sent = client
                            .post(&url)
                            .json(&request("x", "FP32", &[1, 1], json!([1.0])))
                            .send()
                            .await;
                        match sent {
                            Ok(r) if r.status() == 200 => {
                                let body: Value = r.json().await.unwrap();
                                answers.lock().unwrap().push(output_f32(&body, "y")[0]);
                            }
                            Ok(r) => {
                                failures.fetch_add(1, Ordering::Relaxed);
                                eprintln!("failed request: {} {}", r.status(), r.text().await.unwrap_or_default());
                            }
                            Err(e) => {
                                failures.fetch_add(1, Ordering::Relaxed);
                                eprintln!("failed request: {e}");
                            }
                        }
                    }
                })
            })
            .collect();
        Self {
            stop,
            failures,
            answers,
            tasks,
        }
    }

    fn answered(&self) -> usize {
        self.answers.lock().unwrap().len()
    }

    fn last_answer(&self) -> Option<f32> {
        self.answers.lock().unwrap().last().copied()
    }

    async fn finish(self) -> (u64, Vec<f32>) {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            task.await.unwrap();
        }
        let answers = self.answers.lock().unwrap().clone();
        (self.failures.load(Ordering::Relaxed), answers)
    }
}

/// Waits (bounded) until `check` holds.
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    poll_until(what, || std::future::ready(check().then_some(()))).await
}

/// Probes (bounded) until `probe` gives an answer, and returns it.
async fn poll_until<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    for _ in 0..400 {
        if let Some(answer) = probe().await {
            return answer;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("timed out waiting for {what}");
}

/// Waits until GET `path` answers `status`.
async fn wait_for_status(server: &TestServer, path: &str, status: u16) {
    poll_until(&format!("{path} to answer {status}"), || async {
        (server.get(path).await.0 == status).then_some(())
    })
    .await
}

/// Waits until the faulty model's index entry gives a reason containing `needle`.
async fn wait_for_reason(server: &TestServer, needle: &str) -> Value {
    poll_until(&format!("'{needle}' in the index"), || async {
        let entry = index_entry(server, "faulty").await;
        entry["reason"]
            .as_str()
            .is_some_and(|r| r.contains(needle))
            .then_some(entry)
    })
    .await
}

async fn index_entry(server: &TestServer, name: &str) -> Value {
    let r = server
        .client
        .post(server.url("/v2/repository/index"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let index: Value = r.json().await.unwrap();
    index
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .cloned()
        .unwrap_or(Value::Null)
}

fn faulty_folder(repository: &Path, toml: &str) {
    let dir = repository.join("faulty");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("predict.wasm"), plugin("faulty")).unwrap();
    std::fs::write(dir.join("model.toml"), toml).unwrap();
}

/// A repository holding the faulty model at version 1 (y = 2x), served in poll mode.
async fn serve_faulty_version_1() -> (tempfile::TempDir, TestServer) {
    let repository = tempfile::tempdir().unwrap();
    faulty_folder(repository.path(), &faulty_toml(1, 2, ""));
    let server = TestServer::start(repository.path()).await;
    (repository, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_version_takes_over_under_load_with_zero_failed_requests() {
    let (repository, server) = serve_faulty_version_1().await;
    let load = Load::start(&server);
    eventually("answers from version 1", || load.answered() > 50).await;
    assert_eq!(load.last_answer(), Some(2.0));

    // Version 2: another build of the plugin (the wasip1 one) with another scale.
    let dir = repository.path().join("faulty");
    replace_file(&dir.join("predict.wasm"), &plugin("faulty-p1"));
    replace_file(&dir.join("model.toml"), faulty_toml(2, 3, "").as_bytes());
    eventually("answers from version 2", || load.last_answer() == Some(3.0)).await;
    let (status, meta) = server.get("/v2/models/faulty").await;
    assert_eq!((status, meta["versions"].clone()), (200, json!(["2"])));
    let seen = load.answered();
    eventually("more answers from version 2", || load.answered() > seen + 50).await;

    let (failures, answers) = load.finish().await;
    assert_eq!(failures, 0, "requests failed during the reload");
    let switch = answers.iter().position(|&y| y == 3.0).unwrap();
    assert!(answers[..switch].iter().all(|&y| y == 2.0));
    assert!(
        answers.iter().all(|&y| y == 2.0 || y == 3.0),
        "only the two versions answered"
    );
    assert_eq!(server.get("/v2/models/faulty/versions/2").await.0, 200);
    assert_eq!(server.get("/v2/models/faulty/versions/1").await.0, 404);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_builds_never_take_a_working_model_down() {
    let (repository, server) = serve_faulty_version_1().await;
    let load = Load::start(&server);
    eventually("answers", || load.answered() > 20).await;
    let dir = repository.path().join("faulty");

    // A corrupt build.
    replace_file(&dir.join("predict.wasm"), b"\0asm\x0d\0\x01\0 this is not a component");
    let entry = wait_for_reason(&server, "predict.wasm").await;
    assert_eq!(entry["state"], "READY", "{entry}");
    assert_eq!(entry["version"], "1", "{entry}");
    let reason = entry["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("cannot compile"), "{reason}");

    // A build whose init fails (version 2).
    replace_file(&dir.join("predict.wasm"), &plugin("faulty"));
    replace_file(
        &dir.join("model.toml"),
        faulty_toml(2, 3, "fail_init = \"true\"").as_bytes(),
    );
    let entry = wait_for_reason(&server, "init failed as configured").await;
    assert_eq!(entry["version"], "1", "{entry}");
    let seen = load.answered();
    eventually("version 1 still answering", || load.answered() > seen + 20).await;
    assert_eq!(load.last_answer(), Some(2.0));

    // A good build recovers.
    replace_file(&dir.join("model.toml"), faulty_toml(3, 4, "").as_bytes());
    eventually("version 3", || load.last_answer() == Some(4.0)).await;
    let entry = index_entry(&server, "faulty").await;
    assert_eq!(
        (entry["state"].clone(), entry["version"].clone()),
        (json!("READY"), json!("3")),
        "{entry}"
    );
    assert!(entry.get("reason").is_none(), "{entry}");

    let (failures, _) = load.finish().await;
    assert_eq!(failures, 0);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_folders_come_and_go() {
    let repository = tempfile::tempdir().unwrap();
    let server = TestServer::start(repository.path()).await;
    assert_eq!(server.post_faulty(&[1.0]).await.0, 404);

    // Written into a hidden folder, then renamed into place: one atomic appearance.
    let staging = repository.path().join(".staging");
    faulty_folder(&staging, &faulty_toml(1, 2, ""));
    std::fs::rename(staging.join("faulty"), repository.path().join("faulty")).unwrap();
    wait_for_status(&server, "/v2/models/faulty/ready", 200).await;
    let status = server.post_faulty(&[1.0]).await.0;
    assert_eq!(status, 200);

    std::fs::remove_dir_all(repository.path().join("faulty")).unwrap();
    wait_for_status(&server, "/v2/models/faulty", 404).await;
    assert_eq!(server.post_faulty(&[1.0]).await.0, 404);
    server.stop().await;
}

/// A repository on a file system without file events (NFS) is looked at every
/// `--watch-poll-ms`: a new version is served, even one of the same size written within
/// the same second, and so is a rollback to a file older than the one it replaces (as
/// `cp -p` or `rsync -a` leave it); a folder that goes is unloaded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repository_looked_at_by_polling_follows_its_changes() {
    let repository = tempfile::tempdir().unwrap();
    faulty_folder(repository.path(), &faulty_toml(1, 2, ""));
    let mut config = common::serve_config(repository.path());
    config.watch_poll_ms = 100;
    let server = TestServer::start_with(config).await;
    assert_eq!(output_f32(&server.post_faulty(&[1.0]).await.1, "y"), vec![2.0]);
    // The first look is what later ones compare with.
    tokio::time::sleep(Duration::from_millis(300)).await;

    std::fs::write(repository.path().join("faulty/model.toml"), faulty_toml(2, 3, "")).unwrap();
    poll_until("version 2 served", || async {
        let (status, body) = server.post_faulty(&[1.0]).await;
        (status == 200 && output_f32(&body, "y") == vec![3.0]).then_some(())
    })
    .await;

    let toml = repository.path().join("faulty/model.toml");
    std::fs::write(&toml, faulty_toml(1, 2, "")).unwrap();
    let an_hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(&toml)
        .unwrap()
        .set_modified(an_hour_ago)
        .unwrap();
    poll_until("the rollback to version 1 served", || async {
        let (status, body) = server.post_faulty(&[1.0]).await;
        (status == 200 && output_f32(&body, "y") == vec![2.0]).then_some(())
    })
    .await;

    std::fs::remove_dir_all(repository.path().join("faulty")).unwrap();
    wait_for_status(&server, "/v2/models/faulty", 404).await;
    server.stop().await;
}

async fn post_with_token(server: &TestServer, path: &str, token: Option<&str>) -> (u16, String) {
    let mut r = server.client.post(server.url(path));
    if let Some(token) = token {
        r = r.bearer_auth(token);
    }
    let r = r.send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repository_api_loads_and_unloads_behind_a_token() {
    let repository = tempfile::tempdir().unwrap();
    faulty_folder(repository.path(), &faulty_toml(1, 2, ""));
    let mut config = common::serve_config(repository.path());
    config.model_control = ModelControl::Explicit;
    config.admin_token = Some("s3cret".into());
    let server = TestServer::start_with(config).await;
    let token = Some("s3cret");

    // Explicit mode loads nothing by itself.
    assert_eq!(server.get("/v2/models/faulty").await.0, 404);
    assert_eq!(server.get("/v2/health/ready").await.0, 200);
    let (status, body) = post_with_token(&server, "/v2/repository/index", token).await;
    assert_eq!(status, 200);
    let index: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        index,
        json!([{"name": "faulty", "state": "UNAVAILABLE", "reason": "not loaded"}])
    );

    for path in [
        "/v2/repository/index",
        "/v2/repository/models/faulty/load",
        "/v2/repository/models/faulty/unload",
    ] {
        assert_eq!(post_with_token(&server, path, None).await.0, 401, "{path}");
        assert_eq!(post_with_token(&server, path, Some("wrong")).await.0, 401, "{path}");
    }

    assert_eq!(
        post_with_token(&server, "/v2/repository/models/faulty/load", token)
            .await
            .0,
        200
    );
    let (status, body) = server.post_faulty(&[1.5]).await;
    assert_eq!((status, output_f32(&body, "y")), (200, vec![3.0]));

    assert_eq!(
        post_with_token(&server, "/v2/repository/models/faulty/unload", token)
            .await
            .0,
        200
    );
    assert_eq!(server.post_faulty(&[1.0]).await.0, 404);
    let (_, body) = post_with_token(&server, "/v2/repository/index", token).await;
    let index: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(index[0]["state"], "UNAVAILABLE");
    assert_eq!(index[0]["reason"], "unloaded");
    assert_eq!(
        post_with_token(&server, "/v2/repository/models/faulty/unload", token)
            .await
            .0,
        404
    );

    // Names that could reach outside the repository are refused before any file access.
    // (A literal ".." never reaches the server: clients normalise it out of the URL.)
    for name in [".hidden", "..%2F..%2Fetc", "a%2Fb", "%2Fetc", "..%5Cx"] {
        let (status, body) = post_with_token(&server, &format!("/v2/repository/models/{name}/load"), token).await;
        assert_eq!(status, 400, "{name}: {body}");
        assert!(body.contains("not a valid model name"), "{name}: {body}");
    }
    let (status, body) = post_with_token(&server, "/v2/repository/models/absent/load", token).await;
    assert_eq!(status, 404, "{body}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repository_api_can_be_switched_off() {
    let repository = tempfile::tempdir().unwrap();
    faulty_folder(repository.path(), &faulty_toml(1, 2, ""));
    // (repository API on, model control, status of the index, status of an unload)
    for (api, control, index, unload) in [
        (RepositoryApi::Off, ModelControl::Poll, 403, 403),
        (RepositoryApi::On, ModelControl::None, 200, 403),
        (RepositoryApi::Open, ModelControl::None, 200, 403),
    ] {
        let mut config = common::serve_config(repository.path());
        config.repository_api = api;
        config.model_control = control;
        let server = TestServer::start_with(config).await;
        assert_eq!(post_with_token(&server, "/v2/repository/index", None).await.0, index);
        assert_eq!(
            post_with_token(&server, "/v2/repository/models/faulty/unload", None)
                .await
                .0,
            unload
        );
        server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wasip1_core_module_is_served() {
    let server = TestServer::start(&common::root().join("tests/models")).await;
    let (status, body) = server
        .post_json(
            "/v2/models/faulty-p1/infer",
            &request("x", "FP32", &[2, 1], json!([1.0, 2.0])),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(output_f32(&body, "y"), vec![5.0, 10.0]);
    let (status, body) = server
        .post_json(
            "/v2/models/faulty-p1/infer",
            &request("x", "FP32", &[1, 1], json!([-1.0])),
        )
        .await;
    assert_eq!(status, 500, "{body}");
    assert!(body["error"].as_str().unwrap().contains("panic requested"), "{body}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_nobody_can_unload_a_model_and_it_keeps_serving() {
    let (_repository, server) = serve_faulty_version_1().await;
    let (status, body) = post_with_token(&server, "/v2/repository/models/faulty/unload", None).await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains("--admin-token"),
        "the refusal says how to allow it: {body}"
    );
    let (status, _) = post_with_token(&server, "/v2/repository/models/faulty/load", None).await;
    assert_eq!(status, 403);
    // The read-only index stays available.
    assert_eq!(post_with_token(&server, "/v2/repository/index", None).await.0, 200);
    let (status, body) = server.post_faulty(&[1.0]).await;
    assert_eq!(status, 200, "{body}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unloaded_model_stays_unloaded_until_its_folder_changes() {
    let repository = tempfile::tempdir().unwrap();
    faulty_folder(repository.path(), &faulty_toml(1, 2, ""));
    let mut config = common::serve_config(repository.path());
    config.repository_api = RepositoryApi::Open;
    let server = TestServer::start_with(config).await;
    assert_eq!(
        post_with_token(&server, "/v2/repository/models/faulty/unload", None)
            .await
            .0,
        200
    );
    // Reading the folder raises watch events too; they must not bring the model back.
    let dir = repository.path().join("faulty");
    let _ = std::fs::read(dir.join("model.toml")).unwrap();
    let _ = std::fs::read(dir.join("predict.wasm")).unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(server.get("/v2/models/faulty").await.0, 404);

    replace_file(&dir.join("model.toml"), faulty_toml(2, 3, "").as_bytes());
    wait_for_status(&server, "/v2/models/faulty/versions/2", 200).await;
    server.stop().await;
}
