//! What every end-to-end test needs: a real server on 127.0.0.1:0 serving a real model
//! repository of plugins built from this repository, and an HTTP client.

#![allow(dead_code)]

pub mod grpc;
pub mod grpc_raw;
pub mod metrics;
pub mod minilm;
pub mod nats;
pub mod onnx;
pub mod otlp;
pub mod process;
pub mod python;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde_json::Value;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use tensorplug::app::config::{CacheArgs, ServeConfig};

/// REST inference routes of the test and example models.
pub const FAULTY_INFER: &str = "/v2/models/faulty/infer";
pub const DIGITS_INFER: &str = "/v2/models/digits/infer";
pub const DIGITS_ONNX_INFER: &str = "/v2/models/digits-onnx/infer";

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ has a parent")
        .to_path_buf()
}

/// The example repository's small models (digits, its ONNX and other-language variants,
/// tiny-resnet), as built by scripts/build-plugins.sh: a folder of links to each of
/// `examples/models`' model folders but `minilm`, whose 90 MB graph only its own tests
/// load ([`example_repository`] is the whole one).
pub fn examples() -> PathBuf {
    static TOYS: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    TOYS.get_or_init(|| {
        let toys = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("toy-examples-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&toys);
        std::fs::create_dir_all(&toys).expect("create the toy repository");
        for entry in std::fs::read_dir(example_repository()).expect("examples/models") {
            let entry = entry.expect("entry");
            if entry.file_name() != "minilm" && entry.path().is_dir() {
                std::os::unix::fs::symlink(entry.path(), toys.join(entry.file_name())).expect("link a model folder");
            }
        }
        toys
    })
    .clone()
}

/// The whole example repository, `examples/models`, as `./scripts/serve-example.sh` serves it.
pub fn example_repository() -> PathBuf {
    root().join("examples/models")
}

/// Fails with instructions when a plugin has not been built.
/// How long a test waits for a server's models to load. A cold compile of a Python or
/// JavaScript component takes ~10 s alone and over a minute while the other tests compile
/// theirs on two cores; a load is never on a request's path, so waiting is honest.
pub const MODELS_LOAD_WITHIN: std::time::Duration = std::time::Duration::from_secs(300);

/// The compile cache every test server shares (in cargo's per-target temporary folder):
/// the Python and JavaScript plugins are 13-18 MB components that take seconds to compile,
/// and the tests serve them from many servers. wasmtime writes cache entries atomically,
/// so concurrent tests may share it.
pub fn compile_cache() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("compile-cache")
}

/// The tests' settings for a server of `repository`: `ServeConfig::for_repository` with
/// the shared [`compile_cache`]. (Tests that must compile afresh use `for_repository`.)
pub fn serve_config(repository: impl Into<PathBuf>) -> ServeConfig {
    let mut config = ServeConfig::for_repository(repository);
    config.cache = CacheArgs {
        cache_dir: Some(compile_cache()),
        no_cache: false,
    };
    config
}

pub fn require_plugins(repository: &Path) {
    for entry in std::fs::read_dir(repository).expect("repository folder") {
        let dir = entry.expect("entry").path();
        // Tests of special files (a FIFO as model.toml or as a plugin) are not read here.
        if !dir.join("model.toml").is_file() {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(dir.join("model.toml")) else {
            continue;
        };
        for line in text.lines().filter(|l| l.contains(".wasm\"")) {
            let file = line.split('"').nth(1).expect("quoted file name");
            assert!(
                dir.join(file).exists(),
                "{} is missing: build the plugins first with ./scripts/build-plugins.sh (./scripts/test.sh does it)",
                dir.join(file).display()
            );
        }
    }
}

/// A server running in this process, stopped (and drained) on drop or by [`stop`].
pub struct TestServer {
    pub address: SocketAddr,
    /// The gRPC port's address, when started with gRPC.
    grpc_address: Option<SocketAddr>,
    pub client: reqwest::Client,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<anyhow::Result<()>>>,
    /// A repository made for this server alone, deleted with it.
    own_repository: Option<tempfile::TempDir>,
}

impl TestServer {
    /// Serves `repository` with default settings.
    pub async fn start(repository: &Path) -> Self {
        Self::start_with(serve_config(repository)).await
    }

    pub async fn start_with(config: ServeConfig) -> Self {
        Self::start_serving(config, false).await
    }

    /// Serves the faulty model alone, under the given `[batching]` and `[limits]` bodies
    /// (see [`faulty_config`]), from a repository deleted with the server.
    pub async fn start_faulty(batching: &str, limits: &str) -> Self {
        let repository = faulty_repository(&faulty_config(batching, limits));
        let mut server = Self::start(repository.path()).await;
        server.own_repository = Some(repository);
        server
    }

    /// Serves REST and gRPC, each on a free loopback port.
    pub async fn start_with_grpc(config: ServeConfig) -> Self {
        Self::start_serving(config, true).await
    }

    async fn start_serving(config: ServeConfig, grpc: bool) -> Self {
        let server = Self::spawn(config, grpc).await;
        server.wait_ready().await;
        server
    }

    /// Serves REST (and gRPC if `grpc`, each on a free loopback port) and returns at once,
    /// having sent nothing: for tests that watch the start-up, or count every connection
    /// the server sees (its `client` stays unused unless they use it).
    pub async fn spawn(config: ServeConfig, grpc: bool) -> Self {
        require_plugins(&config.repository);
        tensorplug::app::telemetry::init(
            &std::env::var("TEST_LOG").unwrap_or_else(|_| "off".into()),
            Default::default(),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let address = listener.local_addr().expect("local address");
        let grpc_listener = match grpc {
            true => Some(
                tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("bind loopback"),
            ),
            false => None,
        };
        let grpc_address = grpc_listener.as_ref().map(|l| l.local_addr().expect("local address"));
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(tensorplug::app::server::run_with_grpc(
            config,
            listener,
            grpc_listener,
            async move {
                let _ = rx.await;
            },
        ));
        Self {
            address,
            grpc_address,
            client: reqwest::Client::new(),
            shutdown: Some(tx),
            task: Some(task),
            own_repository: None,
        }
    }

    /// Waits until the server is live and no model is still loading (models load in
    /// the background once the server listens). Where the index is closed, readiness
    /// has to do.
    pub async fn wait_ready(&self) {
        let started = std::time::Instant::now();
        while started.elapsed() < MODELS_LOAD_WITHIN {
            if self.settled().await {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        panic!(
            "server at {} did not come up within {MODELS_LOAD_WITHIN:?}",
            self.address
        );
    }

    async fn settled(&self) -> bool {
        let live = self.client.get(self.url("/v2/health/live")).send().await;
        if !live.is_ok_and(|r| r.status().is_success()) {
            return false;
        }
        let Ok(index) = self.client.post(self.url("/v2/repository/index")).send().await else {
            return false;
        };
        if !index.status().is_success() {
            let ready = self.client.get(self.url("/v2/health/ready")).send().await;
            return ready.is_ok_and(|r| r.status().is_success());
        }
        let index: Value = index.json().await.unwrap_or_default();
        index
            .as_array()
            .is_some_and(|rows| rows.iter().all(|row| row["state"] != "LOADING"))
    }

    /// The gRPC port's address (the server was started with gRPC).
    pub fn grpc_address(&self) -> SocketAddr {
        self.grpc_address.expect("a server started with gRPC")
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.address, path)
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        let r = self.client.get(self.url(path)).send().await.expect("GET");
        let status = r.status().as_u16();
        let text = r.text().await.expect("body");
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    pub async fn post_json(&self, path: &str, body: &Value) -> (u16, Value) {
        self.post_raw(path, serde_json::to_vec(body).expect("json"), None).await
    }

    pub async fn post_raw(&self, path: &str, body: Vec<u8>, json_header_len: Option<usize>) -> (u16, Value) {
        let mut request = self.client.post(self.url(path)).body(body);
        if let Some(len) = json_header_len {
            request = request.header("Inference-Header-Content-Length", len);
        }
        let r = request.send().await.expect("POST");
        let status = r.status().as_u16();
        let text = r.text().await.expect("body");
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    /// Posts one item per value to `model`, whose one input is `x: FP32 [N, 1]` (the
    /// faulty plugin's; negative values are its fault codes): the status and the body.
    pub async fn post_items(&self, model: &str, values: &[f32]) -> (u16, Value) {
        self.post_json(&format!("/v2/models/{model}/infer"), &items_request(values))
            .await
    }

    /// [`Self::post_items`] to the model named `faulty`.
    pub async fn post_faulty(&self, values: &[f32]) -> (u16, Value) {
        self.post_json(FAULTY_INFER, &items_request(values)).await
    }

    /// [`Self::post_faulty`] in the background: resolves to the status and how long the
    /// request took.
    pub fn spawn_faulty(&self, values: &[f32]) -> JoinHandle<(u16, std::time::Duration)> {
        let (client, url, body) = (self.client.clone(), self.url(FAULTY_INFER), items_request(values));
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            let status = client.post(url).json(&body).send().await.unwrap().status().as_u16();
            (status, started.elapsed())
        })
    }

    /// Stops the server and waits until it has drained.
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.expect("server task").expect("server result");
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// A one-tensor V2 request.
pub fn request(input: &str, datatype: &str, shape: &[u64], data: Value) -> Value {
    serde_json::json!({"inputs": [{"name": input, "datatype": datatype, "shape": shape, "data": data}]})
}

/// A request of one item per value for an input `x: FP32 [N, 1]` (the faulty model's).
pub fn items_request(values: &[f32]) -> Value {
    request("x", "FP32", &[values.len() as u64, 1], serde_json::json!(values))
}

/// The f32 values of an output tensor of a JSON response.
pub fn output_f32(response: &Value, name: &str) -> Vec<f32> {
    output(response, name)["data"]
        .as_array()
        .expect("data array")
        .iter()
        .map(|v| v.as_f64().expect("number") as f32)
        .collect()
}

pub fn output<'a>(response: &'a Value, name: &str) -> &'a Value {
    response["outputs"]
        .as_array()
        .unwrap_or_else(|| panic!("no outputs in {response}"))
        .iter()
        .find(|o| o["name"] == name)
        .unwrap_or_else(|| panic!("no output {name} in {response}"))
}

/// A repository in a temporary folder holding the faulty test plugin under `model.toml`
/// text of the test's choosing (the folder is deleted on drop).
pub fn faulty_repository(model_toml: &str) -> tempfile::TempDir {
    let repository = tempfile::tempdir().expect("temp dir");
    let dir = repository.path().join("faulty");
    std::fs::create_dir(&dir).expect("model folder");
    let plugin = root().join("tests/models/faulty/predict.wasm");
    std::fs::copy(&plugin, dir.join("predict.wasm")).unwrap_or_else(|e| {
        panic!(
            "{}: {e}: build the plugins first with ./scripts/build-plugins.sh",
            plugin.display()
        )
    });
    std::fs::write(dir.join("model.toml"), model_toml).expect("model.toml");
    repository
}

/// The faulty model's configuration with the given `[batching]` and `[limits]` bodies.
pub fn faulty_config(batching: &str, limits: &str) -> String {
    format!(
        "[stages]\npredict = \"predict.wasm\"\n\n[[inputs]]\nname = \"x\"\ndatatype = \"FP32\"\nshape = [1]\n\n\
         [[outputs]]\nname = \"y\"\ndatatype = \"FP32\"\nshape = [1]\n\n[batching]\n{batching}\n\n[limits]\n{limits}\n"
    )
}

/// The repository index (`POST /v2/repository/index`), which needs no token by default.
pub async fn index(server: &TestServer) -> Value {
    let response = server
        .client
        .post(server.url("/v2/repository/index"))
        .send()
        .await
        .expect("index");
    assert_eq!(response.status(), 200);
    response.json().await.expect("index JSON")
}

/// tensorplug's own counters of a model, from `GET /v2/models/{m}/stats`.
pub async fn stats(server: &TestServer, model: &str) -> Value {
    let (status, body) = server.get(&format!("/v2/models/{model}/stats")).await;
    assert_eq!(status, 200, "{body}");
    body["model_stats"][0]["tensorplug"].clone()
}

/// Resident memory of this process (the in-process server included), in bytes.
pub fn resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS");
    kib * 1024
}

/// Waits up to `bound` for the server to close `stream` (EOF or reset), discarding
/// anything it sends; how long after `since` that was, if it did.
pub async fn closed_since(
    stream: &mut (impl tokio::io::AsyncRead + Unpin),
    since: std::time::Instant,
    bound: std::time::Duration,
) -> Option<std::time::Duration> {
    use tokio::io::AsyncReadExt;
    let closed = async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return since.elapsed(),
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(bound, closed).await.ok()
}

/// Waits for every task, in order, and returns their results.
pub async fn join_all<T>(tasks: Vec<tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut results = Vec::with_capacity(tasks.len());
    for task in tasks {
        results.push(task.await.expect("task"));
    }
    results
}
