//! The repository extension over REST (as Triton's): `POST /v2/repository/index`,
//! `POST /v2/repository/models/{m}/load` and `/unload`, under the rules of
//! [`crate::api::repository`]; the token comes as `Authorization: Bearer <token>`.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::AppState;
use crate::api::repository::{self, Change};

/// The bearer token the caller presents, if any.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
}

pub async fn index(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    match state.repository_access.check_read(bearer(&headers)) {
        Ok(()) => Json(repository::index(&state.repository)).into_response(),
        Err(e) => e.into_response(),
    }
}

pub async fn load(state: State<Arc<AppState>>, name: Path<String>, headers: HeaderMap) -> Response {
    respond(state, name, headers, Change::Load).await
}

pub async fn unload(state: State<Arc<AppState>>, name: Path<String>, headers: HeaderMap) -> Response {
    respond(state, name, headers, Change::Unload).await
}

async fn respond(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    change: Change,
) -> Response {
    let token = bearer(&headers);
    match repository::change(&state.repository, &state.repository_access, token, &name, change).await {
        Ok(()) => StatusCode::OK.into_response(),
        Err(e) => e.into_response(),
    }
}
