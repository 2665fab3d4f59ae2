//! End to end: the gRPC port under the same connection bounds as REST. Its connections
//! count against the one `--max-connections` cap shared with REST, a connection that never
//! speaks is closed at the idle timeout, and a long call or a quiet client is not (the
//! server's HTTP/2 pings keep healthy connections busy).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tonic::transport::Channel;
use tonic::Code;

use crate::common;
use crate::common::grpc::faulty_request;
use crate::common::TestServer;
use tensorplug::app::config::ConnectionArgs;
use tensorplug::protocol::grpc::proto::grpc_inference_service_client::GrpcInferenceServiceClient;
use tensorplug::protocol::grpc::proto::ServerReadyRequest;

/// The longest any single wait here may take.
const BOUND: Duration = Duration::from_secs(10);
const IDLE: Duration = Duration::from_millis(600);

struct Server {
    server: TestServer,
    rest: SocketAddr,
    grpc: SocketAddr,
    _repository: tempfile::TempDir,
}

impl Server {
    /// The faulty model (a 2 s time limit) with a cap of `cap` connections, a long
    /// header timeout (so raw REST connections hold their slot) and a short idle timeout.
    async fn start(cap: u32) -> Self {
        let repository = common::faulty_repository(&common::faulty_config(
            "max_batch_size = 1",
            "instances = 1\ntimeout_ms = 2000",
        ));
        let mut config = common::serve_config(repository.path());
        config.connections = ConnectionArgs {
            header_read_timeout_ms: 20_000,
            idle_timeout_ms: IDLE.as_millis() as u64,
            max_connections: cap,
            ..ConnectionArgs::default()
        };
        // Probed over gRPC only: every connection counts against the cap.
        let server = TestServer::spawn(config, true).await;
        let server = Self {
            rest: server.address,
            grpc: server.grpc_address(),
            server,
            _repository: repository,
        };
        let started = Instant::now();
        while server.ready().await.is_err() {
            assert!(started.elapsed() < BOUND, "the gRPC port never answered");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        server
    }

    async fn client(&self) -> Result<GrpcInferenceServiceClient<Channel>, tonic::transport::Error> {
        let channel = common::grpc::endpoint(self.grpc)
            .connect_timeout(Duration::from_secs(2))
            .connect()
            .await?;
        Ok(GrpcInferenceServiceClient::new(channel))
    }

    /// One ServerReady call on a fresh connection.
    async fn ready(&self) -> Result<bool, String> {
        let mut client = self.client().await.map_err(|e| e.to_string())?;
        // Ready, not only live: the faulty model loads in the background.
        let call = client.server_ready(ServerReadyRequest {});
        match tokio::time::timeout(Duration::from_secs(3), call).await {
            Ok(Ok(answer)) if answer.get_ref().ready => Ok(true),
            Ok(Ok(_)) => Err("not ready yet".into()),
            Ok(Err(status)) => Err(status.to_string()),
            Err(_) => Err("no answer in 3 s".into()),
        }
    }

    async fn stop(self) {
        tokio::time::timeout(BOUND, self.server.stop())
            .await
            .expect("stopped in time");
    }
}

/// Waits until the server closes `stream`; how long that took.
async fn closed_within(stream: &mut TcpStream, bound: Duration) -> Option<Duration> {
    common::closed_since(stream, Instant::now(), bound).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_grpc_connection_is_closed_at_the_idle_timeout_and_busy_ones_are_not() {
    let _alone = crate::ONE_AT_A_TIME.lock().await;
    let server = Server::start(64).await;

    // Connects and never sends the HTTP/2 preface.
    let mut silent = TcpStream::connect(server.grpc).await.expect("connect");
    let closed = closed_within(&mut silent, BOUND)
        .await
        .expect("the silent connection is closed");
    assert!(
        closed >= IDLE - Duration::from_millis(100) && closed <= IDLE + Duration::from_millis(1500),
        "closed after {closed:?} for an idle timeout of {IDLE:?}"
    );

    // A call that runs for 2 s (the model's time limit), over three idle timeouts: the
    // connection stays up and the call gets its own answer.
    let mut client = server.client().await.expect("connect");
    let started = Instant::now();
    let status = client
        .model_infer(faulty_request(&[-2.0]))
        .await
        .expect_err("a time limit");
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert!(started.elapsed() >= Duration::from_secs(2));
    // Quiet for two idle timeouts, then used again on the same connection.
    tokio::time::sleep(IDLE * 2).await;
    let answer = client
        .model_infer(faulty_request(&[1.0]))
        .await
        .expect("the connection still serves");
    assert_eq!(answer.into_inner().raw_output_contents.len(), 1);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_and_rest_connections_share_one_cap() {
    let _alone = crate::ONE_AT_A_TIME.lock().await;
    let server = Server::start(2).await;
    // Two REST connections sit in their headers and hold both slots. The readiness
    // probe's gRPC connection can hold a slot for a moment after the client has dropped
    // it, and a REST connection arriving then is refused (a 503, then closed): one that
    // is closed within 200 ms is replaced, until two are held.
    let mut held = Vec::new();
    let started = Instant::now();
    while held.len() < 2 {
        assert!(started.elapsed() < BOUND, "two REST connections never held both slots");
        let mut stream = TcpStream::connect(server.rest).await.expect("connect");
        if closed_within(&mut stream, Duration::from_millis(200)).await.is_none() {
            held.push(stream);
        }
    }
    // A gRPC connection beyond the cap is closed at once, without waiting on the client.
    let mut refused = TcpStream::connect(server.grpc).await.expect("connect");
    let closed = closed_within(&mut refused, Duration::from_secs(2)).await;
    assert!(closed.is_some(), "a connection beyond the cap stays open");
    assert!(
        server.ready().await.is_err(),
        "a gRPC call beyond the cap is not served"
    );
    let (status, _) = rest_get(server.rest, "/v2/health/live").await;
    assert_eq!(status, 503, "a REST connection beyond the cap is refused too");

    // Slots free again: gRPC serves.
    drop(held);
    let started = Instant::now();
    while server.ready().await != Ok(true) {
        assert!(started.elapsed() < BOUND, "gRPC never served again");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // And counted on /metrics.
    let (status, body) = rest_get(server.rest, "/metrics").await;
    assert_eq!(status, 200);
    let line = body
        .lines()
        .find(|l| l.starts_with("tensorplug_grpc_connections_refused_total "))
        .expect("refused gRPC connections counted");
    let refused: u64 = line.rsplit(' ').next().and_then(|v| v.parse().ok()).expect("a count");
    assert!(refused >= 1, "{line}");
    server.stop().await;
}

/// One GET over a fresh connection of its own, read to its close: status and body (the
/// refusal beyond the cap is written before the request is read, so an HTTP client that
/// is still sending may see a reset instead; a raw socket reads it).
async fn rest_get(address: SocketAddr, path: &str) -> (u16, String) {
    use tokio::io::AsyncWriteExt;
    let mut stream = TcpStream::connect(address).await.expect("connect");
    let request = format!("GET {path} HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n");
    let _ = stream.write_all(request.as_bytes()).await;
    let mut bytes = Vec::new();
    let read = tokio::time::timeout(BOUND, async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => bytes.extend_from_slice(&buf[..n]),
            }
        }
    });
    read.await.expect("an answer and a close in time");
    let text = String::from_utf8_lossy(&bytes).to_string();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP answer to GET {path}: {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}
