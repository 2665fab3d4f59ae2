//! A raw HTTP/2 gRPC client (h2), for tests that must send what no gRPC library would —
//! malformed messages, broken framing, a message cut short — and read the answer's
//! headers and trailers exactly as they arrive.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use h2::client::SendRequest;
use tokio::net::TcpStream;
use tonic::codegen::http::{HeaderMap, Request};

/// One gRPC message framed: the uncompressed flag, its length, its bytes.
pub fn frame(message: &[u8]) -> Vec<u8> {
    let mut framed = Vec::with_capacity(message.len() + 5);
    framed.push(0);
    framed.extend_from_slice(&(message.len() as u32).to_be_bytes());
    framed.extend_from_slice(message);
    framed
}

/// What the server answered.
#[derive(Debug)]
pub struct RawAnswer {
    /// The HTTP status (200 for every gRPC answer; h2's own refusals are other).
    pub http_status: u16,
    pub headers: HeaderMap,
    pub data: Vec<u8>,
    pub trailers: Option<HeaderMap>,
}

impl RawAnswer {
    /// Where the status is: the trailers, or the headers of a trailers-only answer.
    pub fn status_headers(&self) -> &HeaderMap {
        match &self.trailers {
            Some(trailers) if trailers.contains_key("grpc-status") => trailers,
            _ => &self.headers,
        }
    }

    pub fn status(&self) -> tonic::Status {
        tonic::Status::from_header_map(self.status_headers()).unwrap_or_else(|| panic!("no grpc-status in {self:?}"))
    }

    /// The answer's metadata as grpc-core counts it against its 8 KiB default:
    /// each entry's name and value plus 32 bytes.
    pub fn metadata_bytes(&self) -> usize {
        let size = |map: &HeaderMap| map.iter().map(|(k, v)| k.as_str().len() + v.len() + 32).sum::<usize>();
        size(&self.headers) + self.trailers.as_ref().map_or(0, size)
    }
}

/// One HTTP/2 connection to the gRPC port.
#[derive(Clone)]
pub struct RawClient {
    send: SendRequest<Bytes>,
    address: SocketAddr,
}

impl RawClient {
    pub async fn connect(address: SocketAddr) -> Self {
        let tcp = TcpStream::connect(address).await.expect("connect");
        let (send, connection) = h2::client::handshake(tcp).await.expect("HTTP/2 handshake");
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Self { send, address }
    }

    /// The server's SETTINGS_MAX_CONCURRENT_STREAMS as this connection applies it.
    pub async fn max_concurrent_streams(&self) -> usize {
        // The server's settings arrive just after the handshake.
        let mut send = self.send.clone().ready().await.expect("ready");
        for _ in 0..50 {
            if send.current_max_send_streams() != usize::MAX {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            send = send.ready().await.expect("ready");
        }
        send.current_max_send_streams()
    }

    /// Calls `path` with `chunks` as the request body (ended if `end`), and reads the
    /// whole answer; None if it has not ended within `within`.
    pub async fn call(&self, path: &str, chunks: Vec<Vec<u8>>, end: bool, within: Duration) -> Option<RawAnswer> {
        self.call_with(path, &[], chunks, end, within).await
    }

    pub async fn call_with(
        &self,
        path: &str,
        headers: &[(&str, &str)],
        chunks: Vec<Vec<u8>>,
        end: bool,
        within: Duration,
    ) -> Option<RawAnswer> {
        let mut request = Request::post(format!("http://{}{path}", self.address))
            .header("content-type", "application/grpc")
            .header("te", "trailers");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request.body(()).expect("request");
        let mut send = self.send.clone().ready().await.expect("ready");
        let no_body = chunks.is_empty() && end;
        let (response, mut stream) = send.send_request(request, no_body).expect("send the request");
        let count = chunks.len();
        for (i, chunk) in chunks.into_iter().enumerate() {
            let last = end && i + 1 == count;
            stream.send_data(Bytes::from(chunk), last).expect("send data");
        }
        let read = async move {
            let response = response.await.ok()?;
            let http_status = response.status().as_u16();
            let headers = response.headers().clone();
            let mut body = response.into_body();
            let mut data = Vec::new();
            while let Some(chunk) = body.data().await {
                let chunk = chunk.ok()?;
                let _ = body.flow_control().release_capacity(chunk.len());
                data.extend_from_slice(&chunk);
            }
            let trailers = body.trailers().await.ok()?;
            // Keeps the request stream open (unless ended) until the answer is read.
            drop(stream);
            Some(RawAnswer {
                http_status,
                headers,
                data,
                trailers,
            })
        };
        tokio::time::timeout(within, read).await.ok().flatten()
    }
}
