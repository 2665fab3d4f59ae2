//! The REST edge: Open Inference Protocol (KServe V2) routes over axum, and OpenAI's
//! embeddings routes for the models that declare them (`openai.rs`).
//!
//! Knows nothing of wasmtime: it decodes requests, asks the repository for the model,
//! hands items to it and encodes what comes back.

mod body;
pub mod connections;
mod error;
mod health;
mod infer;
pub use infer::REST_EDGE;
pub mod metrics;
mod openai;
pub use openai::OPENAI_EDGE;
mod repository;
mod response;
mod scrape;
pub mod status;
mod trace;

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
    /// What `GET /metrics` serves, and the REST edge's request counters; None with
    /// `--metrics off`.
    pub metrics: Option<metrics::HttpMetrics>,
}

/// The inference routes: counted by their handler, which knows its route, so that the
/// hot path goes through no middleware.
pub const INFER_ROUTE: &str = "/v2/models/{model}/infer";
pub const INFER_VERSION_ROUTE: &str = "/v2/models/{model}/versions/{version}/infer";

/// The V2 REST routes.
pub fn router(state: Arc<AppState>) -> Router {
    let others = Router::new()
        .route("/v2", get(health::server_metadata))
        .route("/v2/health/live", get(health::live))
        .route("/v2/health/ready", get(health::ready))
        .route("/metrics", get(metrics::metrics))
        .route("/v2/models/{model}", get(health::model_metadata))
        .route("/v2/models/{model}/versions/{version}", get(health::model_metadata))
        .route("/v2/models/{model}/ready", get(health::model_ready))
        // Triton's statistics extension; the fixed path wins over a model named `stats`.
        .route("/v2/models/stats", get(health::all_stats))
        .route("/v2/models/{model}/stats", get(health::model_stats))
        .route("/v2/models/{model}/versions/{version}/stats", get(health::model_stats))
        .route("/v2/models/{model}/versions/{version}/ready", get(health::model_ready))
        .route("/v2/repository/index", post(repository::index))
        .route("/v2/repository/models/{model}/load", post(repository::load))
        .route("/v2/repository/models/{model}/unload", post(repository::unload))
        .route("/v1/models", get(openai::models))
        .route("/v1/models/{model}", get(openai::model));
    // After routing, so that requests are counted by their route's template. (A
    // middleware costs a few allocations per request: fine here, not on inference.)
    let others = match &state.metrics {
        Some(m) => others.route_layer(axum::middleware::from_fn_with_state(m.clone(), metrics::count_requests)),
        None => others,
    };
    Router::new()
        .route(INFER_ROUTE, post(infer::infer))
        .route(INFER_VERSION_ROUTE, post(infer::infer))
        // OpenAI's embeddings route, counted by its handler like the V2 inference routes.
        .route(openai::EMBEDDINGS_ROUTE, post(openai::embeddings))
        .merge(others)
        .fallback(health::no_route)
        // Failed items are logged where they fail, with their reason; the layer's own
        // failure line would only repeat the status.
        .layer(TraceLayer::new_for_http().on_failure(DefaultOnFailure::new().level(Level::DEBUG)))
        .with_state(state)
}
