//! Health, readiness and metadata routes.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::AppState;
use crate::api::find_model;
use crate::protocol::{ModelMetadata, ServerMetadata, TensorMetadata};
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

fn metadata(model: &Model) -> ModelMetadata {
    let config = &model.config;
    let describe = |specs: &[crate::model::config::TensorSpec]| {
        specs
            .iter()
            .map(|spec| TensorMetadata {
                name: spec.name.clone(),
                datatype: spec.datatype,
                shape: config.metadata_shape(spec),
            })
            .collect()
    };
    ModelMetadata {
        name: config.name.clone(),
        versions: vec![config.version.clone()],
        platform: "tensorplug_wasm".into(),
        inputs: describe(&config.inputs),
        outputs: describe(&config.outputs),
    }
}

/// The `{model}` and optional `{version}` segments of a model route.
#[derive(serde::Deserialize)]
pub struct ModelPath {
    pub model: String,
    pub version: Option<String>,
}

pub async fn model_metadata(State(state): State<Arc<AppState>>, Path(path): Path<ModelPath>) -> Response {
    match find_model(&state.repository, &path.model, path.version.as_deref()) {
        Ok(model) => Json(metadata(&model)).into_response(),
        Err(e) => e.into_response(),
    }
}

pub async fn model_ready(State(state): State<Arc<AppState>>, Path(path): Path<ModelPath>) -> Response {
    match find_model(&state.repository, &path.model, path.version.as_deref()) {
        Ok(model) => Json(serde_json::json!({ "name": model.config.name, "ready": true })).into_response(),
        Err(e) => e.into_response(),
    }
}

/// Any route the server does not have: a V2 error body rather than an empty 404.
pub async fn no_route(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    let path = crate::protocol::clip(uri.path()).into_owned();
    super::response::error(StatusCode::NOT_FOUND, &format!("no route {method} {path}"))
}

/// `GET /v2/models/{m}/stats`: Triton's statistics extension (the counts it defines),
/// plus tensorplug's own counters under `tensorplug`.
pub async fn model_stats(State(state): State<Arc<AppState>>, Path(name): Path<String>) -> Response {
    let model = match find_model(&state.repository, &name, None) {
        Ok(model) => model,
        Err(e) => return e.into_response(),
    };
    let stats = model.stats.snapshot();
    Json(serde_json::json!({
        "model_stats": [{
            "name": model.config.name,
            "version": model.config.version,
            "inference_count": stats.items,
            "execution_count": stats.batches,
            "inference_stats": {
                "success": {"count": stats.items_ok},
                "fail": {"count": stats.items_failed},
            },
            "tensorplug": {
                "instances": model.config.limits.instances,
                "instances_live": stats.instances_live,
                "batches": stats.batches,
                "items": stats.items,
                "items_abandoned": stats.items_abandoned,
                "traps": stats.traps,
            },
        }]
    }))
    .into_response()
}
