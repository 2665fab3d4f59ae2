//! The REST edge: Open Inference Protocol (KServe V2) routes over axum.
//!
//! Knows nothing of wasmtime: it decodes requests, asks the repository for the model,
//! hands items to it and encodes what comes back.

mod health;
mod infer;
mod response;

use std::sync::Arc;

use axum::routing::{get, post};
use axum::Router;
use tower_http::trace::TraceLayer;

use crate::serving::Repository;

/// What every handler shares.
pub struct AppState {
    pub repository: Arc<Repository>,
    /// Largest accepted request body, in bytes (413 beyond).
    pub max_body_bytes: usize,
}

/// The V2 REST routes.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v2", get(health::server_metadata))
        .route("/v2/health/live", get(health::live))
        .route("/v2/health/ready", get(health::ready))
        .route("/v2/models/{model}", get(health::model_metadata))
        .route(
            "/v2/models/{model}/versions/{version}",
            get(health::model_metadata_versioned),
        )
        .route("/v2/models/{model}/ready", get(health::model_ready))
        .route(
            "/v2/models/{model}/versions/{version}/ready",
            get(health::model_ready_versioned),
        )
        .route("/v2/models/{model}/infer", post(infer::infer))
        .route(
            "/v2/models/{model}/versions/{version}/infer",
            post(infer::infer_versioned),
        )
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}
