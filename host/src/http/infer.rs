//! `POST /v2/models/{m}[/versions/{v}]/infer`: decode, infer ([`InferCall`]), encode.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use tracing::Instrument;

use super::body::{check_media, decode, read_body};
use super::error::HttpError;
use super::health::ModelPath;
use super::metrics::Route;
use super::response::{self, HEADER_CONTENT_LENGTH};
use super::status::item_status;
use super::AppState;
use crate::api::{InferCall, Inferred, ServeError};
use crate::protocol::{encode_multi_status, encode_response, InferRequest, OutputOptions};
use crate::serving::items::Answer;
use crate::serving::{EdgeLabel, Model};

/// The REST edge's requests, counted by their HTTP status.
pub static REST_EDGE: EdgeLabel = EdgeLabel {
    name: "rest",
    status_name: None,
};

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
    let call = match InferCall::start(&state.repository, &REST_EDGE, &name, version.as_deref()) {
        Ok(call) => call,
        Err(error) => return error.into_response(),
    };
    let response = match answer(state, &call, &headers, body).await {
        Ok(response) => response,
        Err(error) => error.into_response(),
    };
    call.answered(response.status().as_u16());
    response
}

async fn answer(state: &AppState, call: &InferCall, headers: &HeaderMap, body: Body) -> Result<Response, HttpError> {
    let request = match read(state, headers, body).instrument(call.span().clone()).await {
        Ok(request) => request,
        Err(error) => {
            call.failed(error.status(), &error);
            return Err(error);
        }
    };
    let inferred = call.run(request).await?;
    // A large answer takes milliseconds to encode: not on an async worker.
    if inferred.output_bytes > OFFLOAD_ENCODE_BYTES {
        let model = call.model().clone();
        return tokio::task::spawn_blocking(move || encode(&model, inferred))
            .await
            .map_err(|e| {
                let error = ServeError::Internal(format!("encoding the answer failed: {e}"));
                call.failed(error.status(), &error);
                error.into()
            });
    }
    Ok(encode(call.model(), inferred))
}

/// The request in the body, if the edge can read it.
async fn read(state: &AppState, headers: &HeaderMap, body: Body) -> Result<InferRequest, HttpError> {
    check_media(headers)?;
    let body = read_body(body, headers, state.max_body_bytes).await?;
    Ok(decode(body, headers).await?)
}

/// Answers whose outputs hold more bytes than this are encoded on the blocking pool.
const OFFLOAD_ENCODE_BYTES: usize = 256 * 1024;

/// The HTTP answer to an inference.
fn encode(model: &Model, inferred: Inferred) -> Response {
    let Inferred {
        answer, id, options, ..
    } = inferred;
    let (model_name, model_version) = (model.config.name.as_str(), model.config.version.as_str());
    match answer {
        Answer::Success(outputs) => success(model_name, model_version, id.as_deref(), &outputs, &options),
        Answer::Failure(error) => response::error(item_status(&error), &error.message),
        Answer::MultiStatus(results) => response::json(
            StatusCode::MULTI_STATUS,
            encode_multi_status(model_name, model_version, id.as_deref(), &results),
        ),
    }
}

fn success(
    model_name: &str,
    model_version: &str,
    id: Option<&str>,
    outputs: &[crate::model::tensor::Tensor],
    options: &OutputOptions,
) -> Response {
    let encoded = encode_response(model_name, model_version, id, outputs, options);
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

fn header_value(text: &str) -> HeaderValue {
    HeaderValue::from_str(text).unwrap_or_else(|_| HeaderValue::from_static("invalid"))
}
