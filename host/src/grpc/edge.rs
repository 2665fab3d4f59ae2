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
//!
//! What the layer and the bodies it wraps share is in [`super::bounds`], which names
//! none of them.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::AtomicU8;
use std::sync::Arc;
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::codegen::http::{Request, Response};
use tonic::codegen::Service;
use tower_layer::Layer;

use super::bounds::{rewrite_client_fault, EdgeBounds};
use super::paced::Paced;
use super::read_deadline::ReadDeadline;
use super::reflection_check::ReflectionCheck;

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
