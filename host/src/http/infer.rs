//! `POST /v2/models/{m}[/versions/{v}]/infer`: decode, infer ([`InferCall`]), encode.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use tracing::Instrument;

use super::body::{check_media, decode, read_body};
use super::error::HttpError;
use super::health::ModelPath;
use super::metrics::Route;
use super::response::{self, HEADER_CONTENT_LENGTH};
use super::status::http_status;
use super::trace;
use super::AppState;
use crate::api::{EncodedAnswer, InferCall};
use crate::protocol::InferRequest;
use crate::serving::{EdgeLabel, Model};
use crate::traces::RequestTrace;

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
    let url = || match &path.version {
        Some(version) => format!("/v2/models/{}/versions/{version}/infer", path.model),
        None => format!("/v2/models/{}/infer", path.model),
    };
    let trace = trace::start(&headers, route, url);
    let traceparent = trace.traceparent();
    let mut response = handle(&state, (path.model, path.version), headers, body, trace).await;
    trace::carry(&mut response, traceparent);
    if let Some(metrics) = &state.metrics {
        metrics.count("POST", Route::Fixed(route), response.status().as_u16());
    }
    response
}

async fn handle(
    state: &AppState,
    (name, version): (String, Option<String>),
    headers: HeaderMap,
    body: Body,
    trace: RequestTrace,
) -> Response {
    let call = match InferCall::start(&state.repository, &REST_EDGE, &name, version.as_deref(), trace) {
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
    let model = inferred.model.clone();
    match EncodedAnswer::inferred_offloaded(inferred).await {
        Ok(encoded) => Ok(response(&model, encoded)),
        Err(error) => {
            call.failed(error.status(), &error);
            Err(error.into())
        }
    }
}

/// The request in the body, if the edge can read it.
async fn read(state: &AppState, headers: &HeaderMap, body: Body) -> Result<InferRequest, HttpError> {
    check_media(headers)?;
    let body = read_body(body, headers, state.max_body_bytes).await?;
    Ok(decode(body, headers).await?)
}

/// The HTTP answer to an inference: an answer with every output is marked with the
/// model version that gave it.
fn response(model: &Model, encoded: EncodedAnswer) -> Response {
    let status = http_status(encoded.status);
    let mut response = match encoded.json_header_len {
        None => response::json(status, encoded.body),
        Some(len) => {
            let mut r = (status, encoded.body).into_response();
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            );
            r.headers_mut().insert(HEADER_CONTENT_LENGTH, HeaderValue::from(len));
            r
        }
    };
    if encoded.status == 200 {
        response
            .headers_mut()
            .insert("x-tensorplug-model-version", header_value(&model.config.version));
    }
    response
}

fn header_value(text: &str) -> HeaderValue {
    HeaderValue::from_str(text).unwrap_or_else(|_| HeaderValue::from_static("invalid"))
}
