//! The repository extension (as Triton's): `POST /v2/repository/index`,
//! `POST /v2/repository/models/{m}/load` and `/unload`.
//!
//! Load and unload change what every client is served, so they are refused unless the
//! server has an admin token (and the caller presents it as `Authorization: Bearer
//! <token>`) or the operator opened them explicitly (`--repository-api open`); they are
//! also refused under `--model-control none`. With a token set, the index demands it
//! too. `--repository-api off` switches every route off.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::AppState;
use crate::config::{ModelControl, RepositoryApi};
use crate::error::ServeError;

/// Checks the API is on and the caller holds the token, if the server has one.
fn authorize(state: &AppState, headers: &HeaderMap) -> Result<(), ServeError> {
    if state.repository_api == RepositoryApi::Off {
        return Err(ServeError::Forbidden(
            "the repository API is disabled (--repository-api off)".into(),
        ));
    }
    let Some(token) = &state.admin_token else {
        return Ok(());
    };
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if presented.is_some_and(|p| constant_time_eq(p.as_bytes(), token.as_bytes())) {
        Ok(())
    } else {
        Err(ServeError::Unauthorized)
    }
}

/// Compares without leaking where the first difference is.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Checks that models may change at all, and that this server lets callers change them.
fn changes_allowed(state: &AppState) -> Result<(), ServeError> {
    if state.admin_token.is_none() && state.repository_api != RepositoryApi::Open {
        return Err(ServeError::Forbidden(
            "loading and unloading models needs an admin token: start the server with --admin-token \
             (or, on a trusted network only, --repository-api open)"
                .into(),
        ));
    }
    if state.model_control == ModelControl::None {
        return Err(ServeError::Forbidden(
            "models cannot be loaded or unloaded under --model-control none".into(),
        ));
    }
    Ok(())
}

pub async fn index(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if let Err(e) = authorize(&state, &headers) {
        return e.into_response();
    }
    let mut listed: Vec<serde_json::Value> = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for (name, entry) in state.repository.index() {
        let mut row = serde_json::json!({ "name": name, "state": entry.status.state() });
        if let Some(model) = entry.status.model() {
            row["version"] = model.config.version.clone().into();
        }
        if let Some(reason) = entry.status.reason() {
            row["reason"] = reason.into();
        }
        seen.insert(name);
        listed.push(row);
    }
    // Folders the server has not been asked to load (explicit mode) are listed too.
    for name in state.repository.model_folders().unwrap_or_default() {
        if !seen.contains(&name) {
            listed.push(serde_json::json!({ "name": name, "state": "UNAVAILABLE", "reason": "not loaded" }));
        }
    }
    listed.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    Json(listed).into_response()
}

pub async fn load(state: State<Arc<AppState>>, name: Path<String>, headers: HeaderMap) -> Response {
    change(state, name, headers, Change::Load).await
}

pub async fn unload(state: State<Arc<AppState>>, name: Path<String>, headers: HeaderMap) -> Response {
    change(state, name, headers, Change::Unload).await
}

enum Change {
    Load,
    Unload,
}

async fn change(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    change: Change,
) -> Response {
    if let Err(e) = authorize(&state, &headers).and_then(|_| changes_allowed(&state)) {
        return e.into_response();
    }
    let done = match change {
        Change::Load => state.repository.load(&name).await,
        Change::Unload => state.repository.unload(&name).await,
    };
    match done {
        Ok(()) => StatusCode::OK.into_response(),
        Err(e) => ServeError::from(e).into_response(),
    }
}
