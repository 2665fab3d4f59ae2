//! The layer every gRPC call passes through — the inference service, health and
//! reflection alike: what tonic does not bound or maps its own way, for every RPC.
//!
//! - Each request message must arrive within the body read timeout
//!   ([`super::read_deadline`]).
//! - Answers go out in small pieces, and one its client leaves unread for the idle timeout
//!   is dropped ([`super::paced`]).
//! - A client's malformed message or framing, which tonic answers `INTERNAL`, is answered
//!   `INVALID_ARGUMENT` ([`super::status::malformed`]), in a trailers-only answer's
//!   headers as in an answer's trailers; a reflection call's, which tonic-reflection
//!   answers `OK`, too ([`super::reflection_check`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::AtomicU8;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tonic::body::Body;
use tonic::codegen::http::{HeaderMap, Request, Response};
use tonic::codegen::Service;
use tonic::{Code, Status};
use tower_layer::Layer;

use super::metrics::GrpcMetrics;
use super::paced::Paced;
use super::read_deadline::ReadDeadline;
use super::reflection_check::{ReflectionCheck, COMPRESSED, MALFORMED};
use super::status::{malformed, status};

/// The bounds the layer applies, shared by every call.
pub struct EdgeBounds {
    /// Longest time one request message may take to arrive (REST's body read timeout).
    pub message_read_timeout: Duration,
    /// Longest time an answer may be left unread (REST's idle timeout, as for its writes).
    pub answer_unread_timeout: Duration,
    /// None with `--metrics off`.
    pub metrics: Option<GrpcMetrics>,
}

/// Wraps the server's routes in [`Edge`].
#[derive(Clone)]
pub struct EdgeLayer {
    bounds: Arc<EdgeBounds>,
}

impl EdgeLayer {
    pub fn new(bounds: EdgeBounds) -> Self {
        Self {
            bounds: Arc::new(bounds),
        }
    }
}

impl<S> Layer<S> for EdgeLayer {
    type Service = Edge<S>;

    fn layer(&self, inner: S) -> Edge<S> {
        Edge {
            inner,
            bounds: self.bounds.clone(),
        }
    }
}

/// See the module's documentation.
#[derive(Clone)]
pub struct Edge<S> {
    inner: S,
    bounds: Arc<EdgeBounds>,
}

/// The RPCs whose client sends a stream of messages: each message has its own deadline,
/// counted from its first byte (the wait between messages is the client's to take).
const CLIENT_STREAMING: [&str; 3] = [
    "/inference.GRPCInferenceService/ModelStreamInfer",
    "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
];

impl<S> Service<Request<Body>> for Edge<S>
where
    S: Service<Request<Body>, Response = Response<Body>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let path = request.uri().path();
        let streaming = CLIENT_STREAMING.contains(&path);
        let malformed_request: Option<Arc<AtomicU8>> = path.contains("ServerReflection").then(Arc::default);
        let check = malformed_request.clone().map(ReflectionCheck::new);
        let bounds = self.bounds.clone();
        let request = request.map(|body| Body::new(ReadDeadline::new(body, streaming, bounds.clone(), check)));
        let answer = self.inner.call(request);
        Box::pin(async move {
            let mut response = answer.await?;
            rewrite_client_fault(response.headers_mut(), bounds.metrics.as_ref());
            Ok(response.map(|body| Body::new(Paced::new(body, bounds, malformed_request))))
        })
    }
}

/// Counts a client's malformed message or framing in `headers` (an answer's headers or
/// trailers), and rewrites the `INTERNAL` that tonic gave it (see [`malformed`]).
pub fn rewrite_client_fault(headers: &mut HeaderMap, metrics: Option<&GrpcMetrics>) {
    // The common case costs one lookup: no status here, or neither INTERNAL nor
    // INVALID_ARGUMENT.
    let code = headers.get("grpc-status").map(|v| v.as_bytes());
    if code != Some(&b"13"[..]) && code != Some(&b"3"[..]) {
        return;
    }
    let Some(answered) = Status::from_header_map(headers) else {
        return;
    };
    let Some(code) = malformed(answered.code(), answered.message()) else {
        return;
    };
    if let Some(metrics) = metrics {
        metrics.count_malformed();
    }
    if code != answered.code() {
        headers.remove("grpc-message");
        // Only fails for a message that cannot be a header, which `status` never gives.
        let _ = status(code, answered.message()).add_header(headers);
    }
}

/// Answers a reflection call whose request the check found wrong (which tonic-reflection
/// ends with `OK`) with what it found, in its final `headers`.
pub fn refuse_malformed(headers: &mut HeaderMap, found: u8, metrics: Option<&GrpcMetrics>) {
    if headers.get("grpc-status").map(|v| v.as_bytes()) != Some(&b"0"[..]) {
        return;
    }
    let refusal = match found {
        MALFORMED => {
            if let Some(metrics) = metrics {
                metrics.count_malformed();
            }
            status(
                Code::InvalidArgument,
                "failed to decode Protobuf message: a reflection request message is malformed",
            )
        }
        COMPRESSED => status(
            Code::Internal,
            "protocol error: received message with compressed-flag but no grpc-encoding was specified",
        ),
        _ => return,
    };
    headers.remove("grpc-message");
    let _ = refusal.add_header(headers);
}
