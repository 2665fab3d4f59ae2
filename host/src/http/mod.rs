//! The REST edge: Open Inference Protocol (KServe V2) routes over axum.
//!
//! Knows nothing of wasmtime: it decodes requests, asks the repository for the model,
//! hands items to it and encodes what comes back.

mod body;
pub mod connections;
mod health;
mod infer;
mod metrics;
mod repository;
mod response;
pub mod status;

use std::sync::Arc;

use axum::routing::{get, post};
use axum::Router;
use tower_http::trace::{DefaultOnFailure, TraceLayer};
use tracing::Level;

use crate::serving::Repository;

/// What every handler shares.
pub struct AppState {
    pub repository: Arc<Repository>,
    /// Largest accepted request body, in bytes (413 beyond).
    pub max_body_bytes: usize,
    /// Who may use `/v2/repository/...`.
    pub repository_access: crate::api::repository::RepositoryAccess,
    /// The REST port's connection counters, for `GET /metrics`.
    pub connections: Arc<connections::ConnectionStats>,
}

/// The V2 REST routes.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v2", get(health::server_metadata))
        .route("/v2/health/live", get(health::live))
        .route("/v2/health/ready", get(health::ready))
        .route("/metrics", get(metrics::metrics))
        .route("/v2/models/{model}", get(health::model_metadata))
        .route("/v2/models/{model}/versions/{version}", get(health::model_metadata))
        .route("/v2/models/{model}/ready", get(health::model_ready))
        .route("/v2/models/{model}/stats", get(health::model_stats))
        .route("/v2/models/{model}/versions/{version}/ready", get(health::model_ready))
        .route("/v2/repository/index", post(repository::index))
        .route("/v2/repository/models/{model}/load", post(repository::load))
        .route("/v2/repository/models/{model}/unload", post(repository::unload))
        .route("/v2/models/{model}/infer", post(infer::infer))
        .route("/v2/models/{model}/versions/{version}/infer", post(infer::infer))
        .fallback(health::no_route)
        // Failed items are logged where they fail, with their reason; the layer's own
        // failure line would only repeat the status.
        .layer(TraceLayer::new_for_http().on_failure(DefaultOnFailure::new().level(Level::DEBUG)))
        .with_state(state)
}
