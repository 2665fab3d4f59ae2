//! Health, readiness and metadata routes.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::AppState;
use crate::api::{self, find_model};
use crate::protocol::ServerMetadata;
use crate::serving::Model;

pub async fn server_metadata() -> Json<ServerMetadata> {
    Json(ServerMetadata {
        name: "tensorplug".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        extensions: vec!["binary_tensor_data".into(), "model_repository".into()],
    })
}

/// `GET /v2/health/live`: `{"live": true}` (V2 clients such as KServe's read the body).
pub async fn live() -> Json<serde_json::Value> {
    Json(serde_json::json!({ "live": true }))
}

/// `GET /v2/health/ready`: `{"ready": bool}`, with 503 when not ready.
pub async fn ready(State(state): State<Arc<AppState>>) -> Response {
    let ready = state.repository.all_ready();
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(serde_json::json!({ "ready": ready }))).into_response()
}

/// The `{model}` and optional `{version}` segments of a model route.
#[derive(serde::Deserialize)]
pub struct ModelPath {
    pub model: String,
    pub version: Option<String>,
}

pub async fn model_metadata(State(state): State<Arc<AppState>>, Path(path): Path<ModelPath>) -> Response {
    match api::find(&state.repository, &path.model, path.version.as_deref()) {
        Ok(model) => Json(api::model_metadata(&model)).into_response(),
        Err(e) => e.into_response(),
    }
}

/// `GET /v2/models/{m}/ready`: `{"name", "ready"}`, with 503 while the model loads or the
/// server drains; 404 for a model or version the server does not serve.
pub async fn model_ready(State(state): State<Arc<AppState>>, Path(path): Path<ModelPath>) -> Response {
    let ready = match api::model_ready(&state.repository, &path.model, path.version.as_deref()) {
        Ok(ready) => ready,
        Err(e) => return e.into_response(),
    };
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let name = crate::protocol::clip(&path.model).into_owned();
    (status, Json(serde_json::json!({ "name": name, "ready": ready }))).into_response()
}

/// Any route the server does not have: a V2 error body rather than an empty 404.
pub async fn no_route(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    let path = crate::protocol::clip(uri.path()).into_owned();
    super::response::error(StatusCode::NOT_FOUND, &format!("no route {method} {path}"))
}

/// `GET /v2/models/{m}[/versions/{v}]/stats`: Triton's statistics extension (the counts it
/// defines), plus tensorplug's own counters under `tensorplug`.
pub async fn model_stats(State(state): State<Arc<AppState>>, Path(path): Path<ModelPath>) -> Response {
    match find_model(&state.repository, &path.model, path.version.as_deref()) {
        Ok(model) => Json(serde_json::json!({ "model_stats": [model_statistics(&model)] })).into_response(),
        Err(e) => e.into_response(),
    }
}

/// `GET /v2/models/stats`: the statistics of every model that serves.
pub async fn all_stats(State(state): State<Arc<AppState>>) -> Response {
    let stats: Vec<serde_json::Value> = state
        .repository
        .index()
        .iter()
        .filter_map(|(_, entry)| entry.status.model().map(|model| model_statistics(model)))
        .collect();
    Json(serde_json::json!({ "model_stats": stats })).into_response()
}

fn model_statistics(model: &Model) -> serde_json::Value {
    let stats = model.stats.snapshot();
    serde_json::json!({
        "name": model.config.name,
        "version": model.config.version,
        "inference_count": stats.items,
        "execution_count": stats.batches,
        "inference_stats": {
            "success": {"count": stats.requests_ok, "ns": stats.requests_ok_ns},
            "fail": {"count": stats.requests_failed, "ns": stats.requests_failed_ns},
            "queue": {"count": stats.queue_items, "ns": stats.queue_ns},
            "compute_infer": {"count": stats.batches, "ns": stats.compute_ns},
        },
        "tensorplug": {
            "items_succeeded": stats.items_ok,
            "items_failed": stats.items_failed,
            "instances": model.config.limits.instances,
            "instances_live": stats.instances_live,
            "batches": stats.batches,
            "items": stats.items,
            "items_abandoned": stats.items_abandoned,
            "traps": stats.traps,
            "instance_replacements": stats.replacements,
            "timeouts": stats.timeouts,
            "queue_depth": model.queue_depth(),
            "graph_bytes": model.shared.graphs.bytes(),
            "ragged_elements": stats.ragged_elements,
            "padding_elements": stats.padding_elements,
        },
    })
}
