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
//! - A request whose metadata is over [`MAX_METADATA_BYTES`] is answered
//!   `RESOURCE_EXHAUSTED` naming the limit, without reaching a service. HTTP/2 lets
//!   through header lists up to [`HEADER_LIST_CEILING`] for it: h2's own refusal, a bare
//!   HTTP 431 (or, past 4 × its limit, the connection closed), is reported by gRPC
//!   clients as `UNKNOWN`, with nothing naming the limit.
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
use super::status::{edge_status, EdgeError};

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

/// Most metadata a request may carry, counted as HTTP/2 counts a header list (each entry's
/// name and value, plus 32 bytes; the pseudo-headers too): hyper's default for
/// SETTINGS_MAX_HEADER_LIST_SIZE, now answered as a gRPC status.
pub const MAX_METADATA_BYTES: usize = 16 * 1024;

/// The header list size HTTP/2 accepts (SETTINGS_MAX_HEADER_LIST_SIZE), so that metadata
/// up to it reaches the layer and is answered with a status. Past it h2 answers HTTP 431
/// itself, and it closes the connection (every call on it) for a header block of more
/// CONTINUATION frames than this size needs, or 4 × this size decoded. 2 MiB puts both
/// far past what a client sends by mistake: 10,000 entries (about 450 KB as HTTP/2 counts
/// them) or a 1 MiB value get the layer's status, their connection untouched. A header
/// block is held while it arrives (one per connection at a time: HTTP/2 does not
/// interleave them) and dropped as soon as the layer has refused it; what a call holds
/// for its length stays within [`MAX_METADATA_BYTES`].
pub const HEADER_LIST_CEILING: u32 = 2 * 1024 * 1024;

/// The request's header list size as HTTP/2 counts it (RFC 9113, 6.5.2).
fn metadata_bytes<B>(request: &Request<B>) -> usize {
    const ENTRY: usize = 32;
    let uri = request.uri();
    let pseudo = [
        (":method".len(), request.method().as_str().len()),
        (":scheme".len(), uri.scheme_str().map_or(0, str::len)),
        (":authority".len(), uri.authority().map_or(0, |a| a.as_str().len())),
        (":path".len(), uri.path_and_query().map_or(0, |p| p.as_str().len())),
    ];
    let pseudo: usize = pseudo.iter().map(|(name, value)| name + value + ENTRY).sum();
    pseudo
        + request
            .headers()
            .iter()
            .map(|(name, value)| name.as_str().len() + value.len() + ENTRY)
            .sum::<usize>()
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
        let bytes = metadata_bytes(&request);
        if bytes > MAX_METADATA_BYTES {
            tracing::debug!(bytes, "gRPC request refused: its metadata is over the limit");
            let refusal = edge_status(&EdgeError::MetadataTooLarge {
                bytes,
                limit: MAX_METADATA_BYTES,
            });
            return Box::pin(std::future::ready(Ok(refusal.into_http())));
        }
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
