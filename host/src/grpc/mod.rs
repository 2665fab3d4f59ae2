//! The gRPC edge: the Open Inference Protocol's `inference.GRPCInferenceService` over
//! tonic, with the standard `grpc.health.v1.Health` and server reflection (v1 and
//! v1alpha) beside it.
//!
//! Like the REST edge it only translates: requests are read from their protobuf messages
//! ([`crate::protocol::grpc`], the wire format every side shares) into
//! [`crate::protocol::InferRequest`]s under the same caps and validation as REST, run through
//! [`crate::api::InferCall`], and the answers put back into messages; errors become gRPC
//! codes in one place, [`status`] (with the table of [`crate::protocol::grpc::code_for`]). Repository calls follow the same
//! [`RepositoryAccess`] rules as REST, with the token from the `authorization`
//! metadata (`Bearer <token>`).

pub mod bounds;
pub mod budget;
pub mod codec;
pub mod convert;
pub mod edge;
mod health;
pub mod incoming;
pub mod metrics;
mod paced;
mod read_deadline;
mod reflection_check;
mod service;
pub mod status;
mod trace;

use std::future::Future;
use std::sync::Arc;

use anyhow::Context;
use tokio::net::TcpListener;
use tonic::transport::Server;

use crate::api::repository::RepositoryAccess;
use crate::serving::Repository;

/// The inference service's server, generated at build time from
/// `proto/grpc_service.proto` over the messages of [`crate::protocol::grpc::proto`], with
/// inference requests decoded by [`codec::CheckedCodec`].
pub mod server {
    #![allow(missing_docs, clippy::all, clippy::pedantic, unused_qualifications)]
    include!(concat!(env!("OUT_DIR"), "/server/inference.rs"));
}

/// Full name of the inference service (also a health-check service name).
pub const SERVICE_NAME: &str = "inference.GRPCInferenceService";

/// What the gRPC edge serves from.
pub struct GrpcState {
    pub repository: Arc<Repository>,
    /// Largest accepted request message, in bytes (the REST body limit).
    pub max_message_bytes: usize,
    /// Who may use the repository RPCs.
    pub repository_access: RepositoryAccess,
    /// Call counters; None with `--metrics off`.
    pub metrics: Option<metrics::GrpcMetrics>,
    /// The connection cap (shared with REST) and idle timeout.
    pub connections: incoming::ConnectionBounds,
    /// Longest time one request message may take to arrive (REST's body read timeout).
    pub message_read_timeout: std::time::Duration,
    /// Most streams (calls) open at once on one connection (HTTP/2's
    /// SETTINGS_MAX_CONCURRENT_STREAMS); the client waits for one to end before the next.
    pub max_concurrent_streams: u32,
}

/// Serves the gRPC services on `listener` until `shutdown` resolves, then stops taking
/// new calls and returns once the calls in flight have finished.
pub async fn serve(
    listener: TcpListener,
    state: GrpcState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let (reporter, health_service) = tonic_health::server::health_reporter();
    let health = health::Health::new(reporter);
    let in_step = tokio::spawn(health.clone().keep_in_step(state.repository.clone()));
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(crate::protocol::grpc::proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let reflection_v1 = reflection().build_v1().context("building the reflection service")?;
    let reflection_v1alpha = reflection()
        .build_v1alpha()
        .context("building the reflection service")?;
    let repository = state.repository.clone();
    let refused = state.metrics.clone();
    let ping_interval = state.connections.ping_interval();
    let edge = edge::EdgeLayer::new(bounds::EdgeBounds {
        message_read_timeout: state.message_read_timeout,
        answer_unread_timeout: state.connections.idle_timeout,
        metrics: state.metrics.clone(),
    });
    let incoming = incoming::accept(listener, state.connections, move || {
        tracing::debug!("gRPC connection refused: the connection cap is reached");
        if let Some(metrics) = &refused {
            metrics.count_refused();
        }
    });
    let inference = server::grpc_inference_service_server::GrpcInferenceServiceServer::new(service::Inference::new(
        state.repository,
        state.repository_access,
        state.metrics,
    ))
    .max_decoding_message_size(state.max_message_bytes)
    .max_encoding_message_size(usize::MAX);
    let shutdown = async move {
        shutdown.await;
        in_step.abort();
        health.stop(&repository).await;
    };
    Server::builder()
        .http2_keepalive_interval(Some(ping_interval))
        .http2_keepalive_timeout(Some(ping_interval))
        .max_concurrent_streams(state.max_concurrent_streams)
        .http2_max_header_list_size(edge::HEADER_LIST_CEILING)
        .layer(edge)
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(inference)
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
        .context("serving gRPC")
}
