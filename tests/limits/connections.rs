//! End to end: the REST port holds no connection forever and a flood of connections
//! cannot starve it. Stalled headers, idle kept-alive connections and stalled bodies are
//! cut off at their timeouts while other clients are served; connections beyond the cap
//! (or beyond what the descriptor limit holds next to its reserve) are refused at once,
//! and a model still reloads meanwhile.
//!
//! The hostile clients are raw sockets; every wait is bounded.

use crate::common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use clap::Parser;
use serde_json::Value;
use tempfile::TempDir;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;

use common::process::ServerProcess;
use common::{output, TestServer};
use tensorplug::app::config::{Cli, ConnectionArgs};

/// The longest any single wait of these tests may take.
const BOUND: Duration = Duration::from_secs(10);

/// How late a timeout may fire on a busy two-core machine and still pass.
const SLACK: Duration = Duration::from_millis(1000);

/// How early a timeout may seem to fire (the test's clock starts a little after the
/// server's).
const EARLY: Duration = Duration::from_millis(100);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn connection_args(header_read_ms: u64, body_read_ms: u64, idle_ms: u64) -> ConnectionArgs {
    ConnectionArgs {
        header_read_timeout_ms: header_read_ms,
        body_read_timeout_ms: body_read_ms,
        idle_timeout_ms: idle_ms,
        ..ConnectionArgs::default()
    }
}

/// The example repository (digits), served in this process. Unlike `TestServer`, it
/// talks to the server only over connections of its own that close after one answer:
/// a pooling client's spare connections would time out too and blur the counts.
struct Examples {
    server: TestServer,
    address: SocketAddr,
}

impl Examples {
    async fn serve(connections: ConnectionArgs) -> Self {
        let mut config = common::serve_config(common::examples());
        config.connections = connections;
        let server = TestServer::spawn(config, false).await;
        let address = server.address;
        // The server listens while its models load: ready once they have.
        let started = tokio::time::Instant::now();
        loop {
            if let Some((200, _, _)) = probe(address, "/v2/health/ready").await {
                break;
            }
            assert!(started.elapsed() < BOUND, "the server never became ready");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Self { server, address }
    }

    /// POSTs `body` to the digits model on a connection of its own.
    async fn infer(&self, body: &[u8]) -> (u16, Value) {
        let mut connection = connect(self.address).await;
        let head = infer_head(body.len()).replace("\r\n\r\n", "\r\nconnection: close\r\n\r\n");
        connection.write_all(head.as_bytes()).await.unwrap();
        connection.write_all(body).await.unwrap();
        let (status, _, body) = read_response(&mut connection).await.expect("an answer");
        (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
    }

    async fn stop(self) {
        tokio::time::timeout(BOUND, self.server.stop())
            .await
            .expect("stopped in time");
    }
}

/// A digits request of one all-zero image, as JSON.
fn digits_body() -> Vec<u8> {
    let request = common::request("input-0", "FP32", &[1, 64], Value::from(vec![0.0f32; 64]));
    serde_json::to_vec(&request).expect("json")
}

fn infer_head(content_length: usize) -> String {
    format!(
        "POST /v2/models/digits/infer HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\n\
         content-length: {content_length}\r\n\r\n"
    )
}

/// A request for `path` that asks the server to close the connection after answering.
fn get_and_close(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n")
}

async fn connect(address: impl tokio::net::ToSocketAddrs) -> TcpStream {
    tokio::time::timeout(BOUND, TcpStream::connect(address))
        .await
        .expect("connect in time")
        .expect("connect")
}

/// One response read off `stream`: status, head and body (by Content-Length). `None` when
/// the connection closes or resets first.
async fn read_response(stream: &mut (impl AsyncRead + Unpin)) -> Option<(u16, String, Vec<u8>)> {
    let read = async {
        let mut bytes = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            if let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&bytes[..end]).to_string();
                let length = head
                    .lines()
                    .find_map(|l| {
                        let (name, value) = l.split_once(':')?;
                        name.eq_ignore_ascii_case("content-length")
                            .then(|| value.trim().parse::<usize>().ok())?
                    })
                    .unwrap_or(0);
                if bytes.len() >= end + 4 + length {
                    let status = head.split_whitespace().nth(1)?.parse().ok()?;
                    return Some((status, head, bytes[end + 4..end + 4 + length].to_vec()));
                }
            }
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return None,
                Ok(n) => bytes.extend_from_slice(&buf[..n]),
            }
        }
    };
    tokio::time::timeout(BOUND, read)
        .await
        .expect("a response or a close in time")
}

/// Waits until the server closes `stream` (EOF or reset), discarding anything it sends,
/// and returns how long after `since` that was. Fails if it stays open for `BOUND`.
async fn closed_after(stream: &mut (impl AsyncRead + Unpin), since: Instant) -> Duration {
    common::closed_since(stream, since, BOUND)
        .await
        .expect("the server closed the connection in time")
}

/// One GET on a connection of its own, closed after the answer; `None` when the
/// connection closes first.
async fn probe(address: impl tokio::net::ToSocketAddrs, path: &str) -> Option<(u16, String, Vec<u8>)> {
    let mut connection = connect(address).await;
    connection.write_all(get_and_close(path).as_bytes()).await.ok()?;
    let response = read_response(&mut connection).await;
    // Waiting for the close means the server has let the connection go.
    closed_after(&mut connection, Instant::now()).await;
    response
}

/// How many connections the server closed for overstaying `timeout`, from /metrics.
async fn timed_out(address: impl tokio::net::ToSocketAddrs, timeout: &str) -> u64 {
    let (status, _, body) = probe(address, "/metrics").await.expect("metrics");
    assert_eq!(status, 200);
    let text = String::from_utf8_lossy(&body).to_string();
    let line = format!("tensorplug_connections_timed_out_total{{timeout=\"{timeout}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&line)?.parse().ok())
        .unwrap_or_else(|| panic!("no {line} in\n{text}"))
}

/// Writes `first`, then `byte` every `every`, until the server closes the connection.
async fn dribble(mut writer: OwnedWriteHalf, first: &'static [u8], byte: u8, every: Duration) {
    if writer.write_all(first).await.is_err() {
        return;
    }
    while writer.write_all(&[byte]).await.is_ok() {
        tokio::time::sleep(every).await;
    }
}

/// Whether `stream` has neither data nor a close waiting (the server holds it silently).
async fn silent(stream: &mut TcpStream) -> bool {
    let mut buf = [0u8; 64];
    tokio::time::timeout(ms(20), stream.read(&mut buf)).await.is_err()
}

fn assert_within(what: &str, elapsed: Duration, timeout: Duration) {
    assert!(
        elapsed + EARLY >= timeout && elapsed <= timeout + SLACK,
        "{what}: after {elapsed:?}, for a timeout of {timeout:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_stalling_in_their_headers_are_cut_off_while_others_are_served() {
    let _alone = crate::ONE_AT_A_TIME.lock().await;
    // Long enough that the good client is surely served before it passes, even on a
    // busy machine.
    let header_read = ms(1500);
    let server = Examples::serve(connection_args(1500, 10_000, 10_000)).await;
    let started = Instant::now();

    // Half a header, then nothing.
    let mut stalled = connect(server.address).await;
    stalled
        .write_all(b"POST /v2/models/digits/infer HTTP/1.1\r\nhost: t\r\ncontent-le")
        .await
        .unwrap();
    // A header that keeps coming, a byte per 50 ms, and never ends (slowloris).
    let (mut dribbled, dribbling) = connect(server.address).await.into_split();
    let dribbler = tokio::spawn(dribble(
        dribbling,
        b"GET /v2/health/live HTTP/1.1\r\nx-pad: ",
        b'a',
        ms(50),
    ));

    // Meanwhile a good client is served.
    let (status, _, _) = probe(server.address, "/v2/health/ready").await.expect("ready");
    assert_eq!(status, 200);
    let (status, body) = server.infer(&digits_body()).await;
    assert_eq!(status, 200, "{body}");
    assert!(output(&body, "label")["data"].is_array(), "{body}");
    let served_by = started.elapsed();

    let stalled_closed = closed_after(&mut stalled, started).await;
    let dribbled_closed = closed_after(&mut dribbled, started).await;
    dribbler.abort();
    assert_within("stalled header", stalled_closed, header_read);
    assert_within("dribbled header", dribbled_closed, header_read);
    assert!(
        served_by < stalled_closed,
        "the good client waited for the stalled ones: served after {served_by:?}"
    );
    assert_eq!(timed_out(server.address, "header_read").await, 2);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_kept_alive_connection_is_closed_at_the_idle_timeout_not_the_header_timeout() {
    let _alone = crate::ONE_AT_A_TIME.lock().await;
    // The idle timeout is the longer one: a connection idling past the header timeout
    // must still be open (hyper's own header timer alone would close it).
    let (header_read, idle) = (ms(300), ms(1200));
    let server = Examples::serve(connection_args(300, 10_000, 1200)).await;
    let mut connection = connect(server.address).await;
    let request = b"GET /v2/health/live HTTP/1.1\r\nhost: t\r\n\r\n";

    connection.write_all(request).await.unwrap();
    let (status, _, _) = read_response(&mut connection).await.expect("first answer");
    assert_eq!(status, 200);
    tokio::time::sleep(header_read * 2).await;
    connection.write_all(request).await.unwrap();
    let (status, _, _) = read_response(&mut connection)
        .await
        .expect("the connection outlived the header timeout while idle");
    assert_eq!(status, 200);

    let served = Instant::now();
    let closed = closed_after(&mut connection, served).await;
    assert_within("idle keep-alive connection", closed, idle);
    // Closed by the idle timeout, not by hyper's header timer (a backstop at 1500 ms).
    assert_eq!(timed_out(server.address, "idle").await, 1);
    assert_eq!(timed_out(server.address, "header_read").await, 0);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_body_is_answered_408_and_closed_while_a_slow_one_in_time_is_served() {
    let _alone = crate::ONE_AT_A_TIME.lock().await;
    let body_read = ms(1000);
    let server = Examples::serve(connection_args(10_000, 1000, 10_000)).await;

    // Promises 1000 bytes, sends a few, then dribbles a space per 100 ms.
    let (mut stalled, mut stalling) = connect(server.address).await.into_split();
    stalling.write_all(infer_head(1000).as_bytes()).await.unwrap();
    let sent_head = Instant::now();
    let staller = tokio::spawn(dribble(stalling, b"{\"inputs\": [", b' ', ms(100)));

    // Sends a good body in four parts over ~450 ms: slow, but within the bound.
    let slow = tokio::spawn({
        let address = server.address;
        async move {
            let body = digits_body();
            let mut connection = connect(address).await;
            connection.write_all(infer_head(body.len()).as_bytes()).await.unwrap();
            for part in body.chunks(body.len().div_ceil(4)) {
                tokio::time::sleep(ms(150)).await;
                connection.write_all(part).await.unwrap();
            }
            read_response(&mut connection).await
        }
    });

    let (status, head, body) = read_response(&mut stalled)
        .await
        .expect("an answer to the stalled body");
    let answered = sent_head.elapsed();
    assert_eq!(status, 408, "{head}\n{}", String::from_utf8_lossy(&body));
    assert!(head.to_ascii_lowercase().contains("connection: close"), "{head}");
    assert_within("stalled body", answered, body_read);
    let closed = closed_after(&mut stalled, sent_head).await;
    assert!(closed <= answered + SLACK, "closed {closed:?} after the head");
    staller.abort();

    let (status, _, body) = slow.await.unwrap().expect("an answer to the slow body");
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(output(&body, "label")["data"].is_array(), "{body}");
    assert_eq!(timed_out(server.address, "body_read").await, 1);
    server.stop().await;
}

#[test]
fn the_connection_flags_default_as_connection_args_and_refuse_zero_timeouts() {
    let Ok(Cli {
        command: tensorplug::app::config::Command::Serve(config),
    }) = Cli::try_parse_from(["tensorplug", "serve"])
    else {
        panic!("serve parses");
    };
    assert_eq!(config.connections, ConnectionArgs::default());
    assert_eq!(
        ConnectionArgs::default(),
        ConnectionArgs {
            header_read_timeout_ms: 10_000,
            body_read_timeout_ms: 60_000,
            idle_timeout_ms: 60_000,
            max_connections: 1024,
        }
    );
    for flag in [
        "--header-read-timeout-ms",
        "--body-read-timeout-ms",
        "--idle-timeout-ms",
        "--max-connections",
    ] {
        assert!(
            Cli::try_parse_from(["tensorplug", "serve", flag, "0"]).is_err(),
            "{flag} 0"
        );
        assert!(
            Cli::try_parse_from(["tensorplug", "serve", flag, "250"]).is_ok(),
            "{flag} 250"
        );
    }
}

/// The real binary, serving a digits repository of its own in poll mode, with its log.
struct Server {
    process: ServerProcess,
    address: SocketAddr,
    /// The repository; deleted on drop.
    repository: TempDir,
    _cache: TempDir,
}

impl Server {
    /// Starts `tensorplug serve` with `args`, under a descriptor limit of `descriptors`
    /// (soft and hard) when given.
    async fn start(args: &[&str], descriptors: Option<u64>) -> Self {
        let repository = tempfile::tempdir().unwrap();
        let digits = repository.path().join("digits");
        std::fs::create_dir(&digits).unwrap();
        for entry in std::fs::read_dir(common::examples().join("digits")).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), digits.join(entry.file_name())).unwrap();
        }
        let cache = tempfile::tempdir().unwrap();
        let cache_dir = cache.path().to_str().expect("a UTF-8 temporary folder");
        let flags = [
            "--model-control",
            "poll",
            "--watch-debounce-ms",
            "100",
            "--cache-dir",
            cache_dir,
        ];
        let process = ServerProcess::spawn_limited(repository.path(), &[&flags[..], args].concat(), descriptors).await;
        Self {
            address: process.address,
            process,
            repository,
            _cache: cache,
        }
    }

    async fn probe(&self, path: &str) -> Option<(u16, String, Vec<u8>)> {
        probe(self.address, path).await
    }

    /// Probes `path` until it is served (not refused), counting the refusals seen.
    async fn probe_until_served(&self, path: &str, refused: &mut u64) -> (u16, Vec<u8>) {
        let deadline = Instant::now() + BOUND;
        loop {
            match self.probe(path).await {
                Some((503, head, _)) if head.to_ascii_lowercase().contains("retry-after: 1") => *refused += 1,
                Some((status, _, body)) => return (status, body),
                None => {}
            }
            assert!(Instant::now() < deadline, "{path} was never served");
            tokio::time::sleep(ms(20)).await;
        }
    }

    /// The value of a metric line starting with `name ` (no labels).
    async fn metric(&self, name: &str, refused: &mut u64) -> u64 {
        let (status, body) = self.probe_until_served("/metrics", refused).await;
        assert_eq!(status, 200);
        let text = String::from_utf8_lossy(&body).to_string();
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in\n{text}"))
    }

    /// Waits until the only connection open is the probe asking.
    async fn wait_until_no_connections(&self, refused: &mut u64) {
        let deadline = Instant::now() + BOUND;
        while self.metric("tensorplug_connections_open", refused).await != 1 {
            assert!(Instant::now() < deadline, "connections stayed open");
            tokio::time::sleep(ms(50)).await;
        }
        // The probe's own connection task ends just after the client sees the close.
        tokio::time::sleep(ms(200)).await;
    }

    fn write_version(&self, version: &str) {
        let file = self.repository.path().join("digits/model.toml");
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(text.contains("version = \"1\""), "{text}");
        std::fs::write(
            &file,
            text.replacen("version = \"1\"", &format!("version = \"{version}\""), 1),
        )
        .unwrap();
    }

    async fn stop(mut self) {
        self.process.terminate();
        let exit = self.process.wait_exit(BOUND).await.expect("the server did not stop");
        assert_eq!(exit.code(), Some(0));
    }
}

/// Holds `cap` silent connections on `server` (its whole capacity), checks that the next
/// one and a flood of `flood` more are refused at once with a 503, that a model reload
/// completes while they are held, and that after their release the refusals show on
/// /metrics and the new version serves.
async fn the_cap_holds_and_a_reload_completes(server: Server, cap: usize, flood: usize) {
    let mut refused = 0;
    server.probe_until_served("/v2/health/ready", &mut refused).await;
    server.wait_until_no_connections(&mut refused).await;

    let mut held = Vec::with_capacity(cap);
    for _ in 0..cap {
        held.push(connect(server.address).await);
    }
    let knocked = Instant::now();
    let mut beyond = connect(server.address).await;
    let (status, head, _) = read_response(&mut beyond).await.expect("an answer beyond the cap");
    let head = head.to_ascii_lowercase();
    assert_eq!(status, 503, "{head}");
    assert!(
        head.contains("retry-after: 1") && head.contains("connection: close"),
        "{head}"
    );
    closed_after(&mut beyond, knocked).await;
    assert!(
        knocked.elapsed() < ms(500),
        "refused only after {:?}",
        knocked.elapsed()
    );
    refused += 1;
    for connection in &mut held {
        assert!(silent(connection).await, "a held connection was answered or closed");
    }
    // Refused connections hold no descriptor of the server's, however many come (their
    // client keeps its end open).
    let mut flooding = Vec::with_capacity(flood);
    for _ in 0..flood {
        let mut connection = connect(server.address).await;
        let (status, _, _) = read_response(&mut connection).await.expect("an answer to the flood");
        assert_eq!(status, 503);
        refused += 1;
        flooding.push(connection);
    }

    // A new version, while the cap is reached: the reload must not starve.
    server.write_version("2");
    let ready = server
        .process
        .wait_for_log("the reload", |l| l.contains("model ready") && l.contains("version=2"))
        .await;
    assert!(!ready.contains("failed"), "{ready}");
    let (status, _, _) = server.probe("/v2/health/live").await.expect("an answer");
    assert_eq!(status, 503, "the cap held through the reload");
    refused += 1;
    for connection in &mut held {
        assert!(silent(connection).await, "a held connection was answered or closed");
    }

    drop(flooding);
    held.pop();
    assert_eq!(
        server
            .metric("tensorplug_connections_refused_total", &mut refused)
            .await,
        refused
    );
    drop(held);
    let (status, body) = server.probe_until_served("/v2/models/digits", &mut refused).await;
    let metadata: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        (status, metadata["versions"].clone()),
        (200, serde_json::json!(["2"])),
        "{metadata}"
    );
    let log = server.process.log();
    assert!(
        !log.iter().any(|l| l.contains("Too many open files")),
        "{}",
        log.join("\n")
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_connection_cap_new_connections_are_refused_at_once_and_a_reload_still_succeeds() {
    let _alone = crate::ONE_AT_A_TIME.lock().await;
    let long = ["--header-read-timeout-ms", "30000", "--idle-timeout-ms", "30000"];
    let server = Server::start(&[&long[..], &["--max-connections", "8"]].concat(), None).await;
    let limits = server
        .process
        .logged("the connection limits", |l| l.contains("connection limits"));
    assert!(limits.contains("max_connections=8"), "{limits}");
    the_cap_holds_and_a_reload_completes(server, 8, 8).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_descriptor_limit_lowers_the_cap_and_keeps_a_reserve_for_reloads() {
    let _alone = crate::ONE_AT_A_TIME.lock().await;
    // 160 descriptors, 128 of them reserved: 32 connections, not the default 1024. Then
    // 32 held and 200 refused: more connections than the server has descriptors.
    let long = ["--header-read-timeout-ms", "30000", "--idle-timeout-ms", "30000"];
    let server = Server::start(&long, Some(160)).await;
    let limits = server
        .process
        .logged("the connection limits", |l| l.contains("connection limits"));
    assert!(
        limits.contains("max_connections=32") && limits.contains("descriptor_limit=160"),
        "{limits}"
    );
    the_cap_holds_and_a_reload_completes(server, 32, 200).await;
}
