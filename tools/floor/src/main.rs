//! `tensorplug-floor`: what the machine allows for the Open Inference Protocol on
//! tensorplug's own stack, with no model — the floor `scripts/bench-load.sh` measures
//! tensorplug against.
//!
//! It serves `POST /v2/models/{m}/infer` over the same HTTP stack (hyper through axum,
//! one multi-threaded tokio runtime) and `ModelInfer` over the same gRPC stack (tonic),
//! and does what tensorplug does to a request short of running it: the body is decoded
//! into typed tensors by tensorplug's own decoder (or the message converted by its own
//! gRPC conversion), and an answer of the shape the model would give (its `model.toml`'s
//! outputs, zero-filled, with the request's batch size) is encoded by tensorplug's own
//! encoder. No batcher, no thread hop, no plugin, no per-request bookkeeping.
//!
//! For the tracing benchmark (scripts/bench-tracing.sh) it is also the cheapest OTLP/HTTP
//! collector there can be: `POST /v1/traces` is read and acknowledged, nothing decoded.
//!
//! `tensorplug-floor MODEL_DIR --http-port P [--grpc-port Q]`; `GET /v2/health/ready`
//! answers 200 once listening.

mod answer;
mod grpc;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use clap::Parser;

use answer::Shapes;

/// The server's allocator (see host/Cargo.toml): the floor differs from tensorplug only by
/// what it leaves out.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The benchmark's floor server (loopback only).
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// A model folder: its model.toml's outputs give the answer's shape.
    model: PathBuf,
    /// REST port on 127.0.0.1.
    #[arg(long)]
    http_port: u16,
    /// gRPC port on 127.0.0.1 (none if absent).
    #[arg(long)]
    grpc_port: Option<u16>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let shapes = Arc::new(Shapes::load(&args.model)?);
    if let Some(port) = args.grpc_port {
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], port)))
            .await
            .with_context(|| format!("binding gRPC port {port}"))?;
        tokio::spawn(grpc::serve(listener, shapes.clone()));
    }
    let router = Router::new()
        .route("/v2/health/ready", get(|| async { "{\"ready\":true}" }))
        .route("/v2/models/{model}/infer", post(infer))
        .route(
            "/v1/traces",
            post(|_spans: Bytes| async { [("content-type", "application/x-protobuf")] }),
        )
        .with_state(shapes);
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], args.http_port)))
        .await
        .with_context(|| format!("binding HTTP port {}", args.http_port))?;
    axum::serve(listener, router).await.context("serving HTTP")
}

/// Decodes the request as tensorplug does and answers zeros of the model's output shapes.
async fn infer(State(shapes): State<Arc<Shapes>>, headers: HeaderMap, body: Bytes) -> Response {
    let json_header_len = headers
        .get("inference-header-content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    match tensorplug::protocol::decode_request(&body, json_header_len) {
        Ok(request) => {
            let encoded = shapes.encode(&request);
            ([(axum::http::header::CONTENT_TYPE, "application/json")], encoded).into_response()
        }
        Err(error) => (StatusCode::BAD_REQUEST, error.to_string()).into_response(),
    }
}
