//! `POST /v2/models/{m}[/versions/{v}]/infer`: decode, infer, encode.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use tracing::Instrument;

use super::body::{check_media, decode, read_body};
use super::health::ModelPath;
use super::metrics::Route;
use super::response::{self, HEADER_CONTENT_LENGTH};
use super::status::{item_status, status_of};
use super::AppState;
use crate::api::{self, ServeError};
use crate::model::outcome::ItemOutcome;
use crate::protocol::{clip, encode_multi_status, encode_response, OutputOptions};
use crate::serving::items::Answer;
use crate::serving::{Answered, Model, Protocol};

pub async fn infer(
    State(state): State<Arc<AppState>>,
    Path(path): Path<ModelPath>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let route = match path.version {
        Some(_) => super::INFER_VERSION_ROUTE,
        None => super::INFER_ROUTE,
    };
    let response = handle(&state, path.model, path.version, headers, body).await;
    if let Some(metrics) = &state.metrics {
        metrics.count("POST", Route::Fixed(route), response.status().as_u16());
    }
    response
}

async fn handle(state: &AppState, name: String, version: Option<String>, headers: HeaderMap, body: Body) -> Response {
    let arrived = std::time::Instant::now();
    // A span per request costs even when nothing is printed, so it is a debug span; the
    // lines logged at the default level carry the model (and id) themselves.
    let span =
        tracing::debug_span!("infer", model = %clip(&name), id = tracing::field::Empty, items = tracing::field::Empty);
    let failed = |error: ServeError| {
        let status = status_of(&error).as_u16();
        span.in_scope(|| tracing::info!(model = %clip(&name), status, "request failed: {error}"));
        error.into_response()
    };
    let model = match api::find_model(&state.repository, &name, version.as_deref()) {
        Ok(model) => model,
        Err(error) => return failed(error),
    };
    let response = match run(state, &model, &headers, body).instrument(span.clone()).await {
        Ok(response) => response,
        Err(error) => failed(error),
    };
    let status = response.status().as_u16();
    model
        .stats
        .record_request(Protocol::Rest, Answered::Http(status), arrived.elapsed());
    response
}

async fn run(state: &AppState, model: &Arc<Model>, headers: &HeaderMap, body: Body) -> Result<Response, ServeError> {
    check_media(headers)?;
    let body = read_body(body, headers, state.max_body_bytes).await?;
    let request = decode(body, headers).await?;
    let span = tracing::Span::current();
    if let Some(id) = &request.id {
        span.record("id", &*clip(id));
    }

    let options = OutputOptions::from_request(&request);
    let id = request.id.clone();
    let inference = api::infer(model, request).await?;
    span.record("items", inference.items);
    let (model_name, model_version) = (model.config.name.clone(), model.config.version.clone());
    let encode = move || encode(&model_name, &model_version, id.as_deref(), inference.answer, &options);
    // A large answer takes milliseconds to encode: not on an async worker.
    if inference.output_bytes > OFFLOAD_ENCODE_BYTES {
        return tokio::task::spawn_blocking(encode)
            .await
            .map_err(|e| ServeError::Internal(format!("encoding the answer failed: {e}")));
    }
    Ok(encode())
}

/// Answers whose outputs hold more bytes than this are encoded on the blocking pool.
const OFFLOAD_ENCODE_BYTES: usize = 256 * 1024;

/// The HTTP answer to an assembled inference.
fn encode(
    model_name: &str,
    model_version: &str,
    id: Option<&str>,
    answer: Answer,
    options: &OutputOptions,
) -> Response {
    match answer {
        Answer::Success(outputs) => {
            let encoded = encode_response(model_name, model_version, id, &outputs, options);
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
            let status = item_status(&error);
            tracing::info!(
                model = model_name,
                id = id.map(clip).as_deref(),
                status = error.status,
                "item failed: {}",
                error.message
            );
            response::error(status, &error.message)
        }
        Answer::MultiStatus(outcomes) => {
            let failed = outcomes.iter().filter(|o| o.is_err()).count();
            tracing::info!(
                model = model_name,
                id = id.map(clip).as_deref(),
                failed,
                items = outcomes.len(),
                "multi-status answer"
            );
            let results: Vec<ItemOutcome> = outcomes
                .into_iter()
                .map(|o| o.map(|item| options.filter(item)))
                .collect();
            response::json(
                StatusCode::MULTI_STATUS,
                encode_multi_status(model_name, model_version, id, &results),
            )
        }
    }
}

fn header_value(text: &str) -> HeaderValue {
    HeaderValue::from_str(text).unwrap_or_else(|_| HeaderValue::from_static("invalid"))
}
