//! `POST /v2/models/{m}[/versions/{v}]/infer`.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use tracing::Instrument;

use super::health::{find_model, ModelPath};
use super::response::{self, HEADER_CONTENT_LENGTH};
use super::AppState;
use crate::error::ServeError;
use crate::items::{assemble, split_request, Answer};
use crate::outcome::ItemOutcome;
use crate::protocol::{decode_request, encode_multi_status, encode_response, OutputOptions};

pub async fn infer(
    State(state): State<Arc<AppState>>,
    Path(path): Path<ModelPath>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    handle(state, path.model, path.version, headers, body).await
}

async fn handle(
    state: Arc<AppState>,
    name: String,
    version: Option<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let span = tracing::info_span!("infer", model = %name, id = tracing::field::Empty, items = tracing::field::Empty);
    let result = run(&state, &name, version.as_deref(), &headers, body)
        .instrument(span.clone())
        .await;
    match result {
        Ok(response) => response,
        Err(error) => {
            span.in_scope(|| tracing::info!(status = error.http_status().as_u16(), "request failed: {error}"));
            error.into_response()
        }
    }
}

async fn run(
    state: &AppState,
    name: &str,
    version: Option<&str>,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, ServeError> {
    let model = find_model(state, name, version)?;
    let body = read_body(body, headers, state.max_body_bytes).await?;
    let json_len = header_usize(headers, HEADER_CONTENT_LENGTH)?;
    let request = decode_request(&body, json_len)?;
    drop(body);
    let span = tracing::Span::current();
    if let Some(id) = &request.id {
        span.record("id", id.as_str());
    }

    let config = &model.config;
    let options = OutputOptions::from_request(&request);
    for requested in &request.outputs {
        if !config.outputs.is_empty() && !config.outputs.iter().any(|o| o.name == requested.name) {
            return Err(ServeError::InvalidInput(format!(
                "unknown output '{}' requested: model '{}' answers {}",
                requested.name,
                config.name,
                config
                    .outputs
                    .iter()
                    .map(|o| o.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
    }
    let timeout = request
        .timeout_us()?
        .map(Duration::from_micros)
        .unwrap_or(config.limits.request_timeout);
    let id = request.id.clone();
    let items = split_request(config, request.inputs)?;
    span.record("items", items.len());

    let outcomes = model.infer(items, timeout).await?;
    let (model_name, model_version) = (config.name.as_str(), config.version.as_str());
    Ok(match assemble(config, outcomes) {
        Answer::Success(outputs) => {
            let encoded = encode_response(model_name, model_version, id.as_deref(), &outputs, &options);
            let mut response = match encoded.json_header_len {
                None => response::json(StatusCode::OK, encoded.body),
                Some(len) => {
                    let mut r = (StatusCode::OK, encoded.body).into_response();
                    r.headers_mut().insert(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("application/octet-stream"),
                    );
                    r.headers_mut().insert(HEADER_CONTENT_LENGTH, HeaderValue::from(len));
                    r
                }
            };
            response
                .headers_mut()
                .insert("x-tensorplug-model-version", header_value(model_version));
            response
        }
        Answer::Failure(error) => {
            let status = StatusCode::from_u16(error.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            tracing::info!(status = error.status, "item failed: {}", error.message);
            response::error(status, &error.message)
        }
        Answer::MultiStatus(outcomes) => {
            let failed = outcomes.iter().filter(|o| o.is_err()).count();
            tracing::info!(failed, items = outcomes.len(), "multi-status answer");
            let results: Vec<ItemOutcome> = outcomes
                .into_iter()
                .map(|o| o.map(|item| options.filter(item)))
                .collect();
            response::json(
                StatusCode::MULTI_STATUS,
                encode_multi_status(model_name, model_version, id.as_deref(), &results),
            )
        }
    })
}

fn header_value(text: &str) -> HeaderValue {
    HeaderValue::from_str(text).unwrap_or_else(|_| HeaderValue::from_static("invalid"))
}

fn header_usize(headers: &HeaderMap, name: &str) -> Result<Option<usize>, ServeError> {
    let Some(value) = headers.get(name) else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .map(Some)
        .ok_or_else(|| ServeError::InvalidInput(format!("header {name}: {value:?} is not a byte count")))
}

/// Reads the whole body, refusing (413) as soon as it passes `limit` bytes.
async fn read_body(body: Body, headers: &HeaderMap, limit: usize) -> Result<bytes::Bytes, ServeError> {
    if let Some(declared) = header_usize(headers, header::CONTENT_LENGTH.as_str())? {
        if declared > limit {
            return Err(ServeError::BodyTooLarge { limit });
        }
    }
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => Err(ServeError::BodyTooLarge { limit }),
        Err(e) => Err(ServeError::InvalidInput(format!("cannot read the request body: {e}"))),
    }
}
