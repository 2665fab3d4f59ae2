//! The real `tensorplug` binary as a child process, for tests that measure the server
//! itself: its memory (`/proc/<pid>/status`), its descriptors, its log lines.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A running `tensorplug serve`, killed on drop.
pub struct ServerProcess {
    pub address: SocketAddr,
    pub client: reqwest::Client,
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
}

impl ServerProcess {
    /// Serves `repository` on a free loopback port with `extra` flags, and waits until
    /// it is ready (every model loaded).
    pub async fn spawn(repository: &Path, extra: &[&str]) -> Self {
        Self::spawn_with_env(repository, extra, &[]).await
    }

    /// The repository index (`POST /v2/repository/index`).
    pub async fn index(&self) -> serde_json::Value {
        self.client
            .post(self.url("/v2/repository/index"))
            .send()
            .await
            .expect("index")
            .json()
            .await
            .expect("index JSON")
    }

    /// Waits until no model is loading any more; the repository index then.
    pub async fn wait_loaded(&self) -> serde_json::Value {
        let started = std::time::Instant::now();
        while started.elapsed() < super::MODELS_LOAD_WITHIN {
            let index = self.index().await;
            if index
                .as_array()
                .is_some_and(|rows| rows.iter().all(|r| r["state"] != "LOADING"))
            {
                return index;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("models still loading: {:?}", self.log());
    }

    /// Serves `repository` like [`Self::spawn`], returning as soon as it listens.
    pub async fn spawn_unready(repository: &Path, extra: &[&str]) -> Self {
        Self::spawn_limited(repository, extra, None).await
    }

    /// [`Self::spawn`] with `env` set in its environment.
    pub async fn spawn_with_env(repository: &Path, extra: &[&str], env: &[(&str, &str)]) -> Self {
        let server = Self::spawn_configured(repository, extra, None, env).await;
        server.wait_ready().await;
        server
    }

    async fn wait_ready(&self) {
        let started = std::time::Instant::now();
        while started.elapsed() < super::MODELS_LOAD_WITHIN {
            if let Ok(r) = self.client.get(self.url("/v2/health/ready")).send().await {
                if r.status().is_success() {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the server never became ready: {:?}", self.log());
    }

    /// [`Self::spawn_unready`] under a limit of `descriptors` open files (soft and hard,
    /// RLIMIT_NOFILE) when given.
    pub async fn spawn_limited(repository: &Path, extra: &[&str], descriptors: Option<u64>) -> Self {
        Self::spawn_configured(repository, extra, descriptors, &[]).await
    }

    async fn spawn_configured(
        repository: &Path,
        extra: &[&str],
        descriptors: Option<u64>,
        env: &[(&str, &str)],
    ) -> Self {
        super::require_plugins(repository);
        // TENSORPLUG_TEST_BINARY: another build (an older one, for "before" figures).
        let binary =
            std::env::var("TENSORPLUG_TEST_BINARY").unwrap_or_else(|_| env!("CARGO_BIN_EXE_tensorplug").into());
        let mut command = Command::new(binary);
        command
            .arg("serve")
            .arg(repository)
            .args(["--host", "127.0.0.1", "--http-port", "0"])
            // gRPC off unless the test asks for it (`--grpc-port 0`: any free port).
            .args(
                (!extra.contains(&"--grpc-port"))
                    .then_some(["--grpc-port", "off"])
                    .into_iter()
                    .flatten(),
            )
            // The tests' shared compile cache unless the test says otherwise.
            .args(
                (!extra.contains(&"--cache-dir") && !extra.contains(&"--no-cache"))
                    .then(|| ["--cache-dir".into(), super::compile_cache().into_os_string()])
                    .into_iter()
                    .flatten(),
            )
            .args(["--log", "info"])
            .args(extra)
            .env_remove("RUST_LOG")
            // The runtime threads CI's two cores give, whatever this machine has.
            .env("TOKIO_WORKER_THREADS", "2")
            // Tracing only where a test turns it on.
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(limit) = descriptors {
            use std::os::unix::process::CommandExt;
            // SAFETY: between fork and exec the closure only calls setrlimit, which is
            // async-signal-safe, on a struct on its own stack.
            unsafe {
                command.pre_exec(move || {
                    let limit = libc::rlimit {
                        rlim_cur: limit,
                        rlim_max: limit,
                    };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let mut child = command.spawn().expect("start the tensorplug binary");
        let log = Arc::new(Mutex::new(Vec::new()));
        for stream in [
            child
                .stdout
                .take()
                .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
            child
                .stderr
                .take()
                .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
        ]
        .into_iter()
        .flatten()
        {
            let log = log.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).split(b'\n').map_while(Result::ok) {
                    log.lock().unwrap().push(String::from_utf8_lossy(&line).into_owned());
                }
            });
        }
        let started = Instant::now();
        let address = loop {
            let found = log.lock().unwrap().iter().find_map(|line| listening_address(line));
            if let Some(address) = found {
                break address;
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!("the server exited with {status}: {:?}", log.lock().unwrap());
            }
            if started.elapsed() > Duration::from_secs(60) {
                // Not yet owned by a `ServerProcess`, whose drop would kill it.
                let _ = child.kill();
                let _ = child.wait();
                panic!("the server did not start: {:?}", log.lock().unwrap());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        Self {
            address,
            client: reqwest::Client::new(),
            child,
            log,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.address, path)
    }

    /// The gRPC port's address, as the start-up log announces it.
    pub fn grpc_address(&self) -> SocketAddr {
        self.log()
            .iter()
            .find_map(|line| line.split(" grpc=").nth(1)?.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("no gRPC address in the log: {:?}", self.log()))
    }

    /// A line already logged that matches `matches`.
    pub fn logged(&self, what: &str, matches: impl Fn(&str) -> bool) -> String {
        let log = self.log();
        log.iter()
            .find(|l| matches(l))
            .cloned()
            .unwrap_or_else(|| panic!("no log line with {what}:\n{}", log.join("\n")))
    }

    /// Waits (up to a minute) for a log line matching `matches`, and returns it.
    pub async fn wait_for_log(&self, what: &str, matches: impl Fn(&str) -> bool) -> String {
        let started = Instant::now();
        loop {
            if let Some(line) = self.log.lock().unwrap().iter().find(|l| matches(l)) {
                return line.clone();
            }
            if started.elapsed() > Duration::from_secs(60) {
                panic!("no log line with {what}; log so far:\n{}", self.log().join("\n"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Every line the server has written so far (stdout and stderr).
    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// Sends SIGTERM: the server should drain and exit.
    pub fn terminate(&self) {
        let sent = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .expect("kill");
        assert!(sent.success());
    }

    /// Waits up to `within` for the process to exit; its exit status if it did.
    pub async fn wait_exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let started = Instant::now();
        while started.elapsed() < within {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        None
    }

    /// Whether the process is still running.
    pub fn is_alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    fn status_kib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).expect("read /proc/<pid>/status");
        status
            .lines()
            .find_map(|line| line.strip_prefix(field)?.trim().strip_suffix("kB")?.trim().parse().ok())
            .unwrap_or_else(|| panic!("{field} missing from /proc/<pid>/status"))
    }

    /// Resident memory now, in KiB.
    pub fn rss_kib(&self) -> u64 {
        self.status_kib("VmRSS:")
    }

    /// Peak resident memory since the last [`Self::reset_peak_rss`], in KiB.
    pub fn peak_rss_kib(&self) -> u64 {
        self.status_kib("VmHWM:")
    }

    /// The `tensorplug` section of `model`'s statistics (`GET /v2/models/{model}/stats`).
    pub async fn stats(&self, model: &str) -> serde_json::Value {
        let stats: serde_json::Value = self
            .client
            .get(self.url(&format!("/v2/models/{model}/stats")))
            .send()
            .await
            .expect("stats")
            .json()
            .await
            .expect("stats JSON");
        stats["model_stats"][0]["tensorplug"].clone()
    }

    /// Starts measuring the peak afresh (Linux: writing 5 to clear_refs resets VmHWM).
    pub fn reset_peak_rss(&self) {
        std::fs::write(format!("/proc/{}/clear_refs", self.pid()), "5").expect("reset the peak RSS");
    }

    /// POSTs `body` as JSON, waiting up to `within` for the answer: the status, the
    /// answer's text and how long it took.
    pub async fn post_timed(&self, path: &str, body: Vec<u8>, within: Duration) -> (u16, String, Duration) {
        let started = Instant::now();
        let response = self
            .client
            .post(self.url(path))
            .header("content-type", "application/json")
            .body(body)
            .timeout(within)
            .send()
            .await
            .expect("the server answers");
        let status = response.status().as_u16();
        let text = response.text().await.expect("a body");
        (status, text, started.elapsed())
    }

    /// Sends raw bytes on a fresh connection and returns everything the server answered
    /// until it closed the connection or `within` passed.
    pub async fn raw_exchange(&self, request: &[u8], within: Duration) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(self.address).await.expect("connect");
        stream.write_all(request).await.expect("send");
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(within, stream.read_to_end(&mut answer)).await;
        String::from_utf8_lossy(&answer).into_owned()
    }
}

/// The REST address a start-up log line announces, in text (`address=...`) or JSON
/// (`"address":"..."`) form.
fn listening_address(line: &str) -> Option<SocketAddr> {
    // The leading space keeps other fields ending in `address` (a gRPC one) out.
    let rest = line
        .split(" address=")
        .nth(1)
        .or_else(|| line.split("\"address\":\"").nth(1))?;
    rest.split(|c: char| c.is_whitespace() || c == '"').next()?.parse().ok()
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
