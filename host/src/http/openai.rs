//! OpenAI's embeddings routes on the REST port, for the models that declare them
//! (`[openai.embeddings]`): `POST /v1/embeddings` translates into the one inference path
//! ([`InferCall`], one item per text, the model's own tokenizer and batching) and back;
//! `GET /v1/models[/{model}]` lists those models.
//!
//! OpenAI has no per-item status: an item that fails fails the request, with that item's
//! status and a message naming its index (`input[3]: ...`).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use tracing::Instrument;

use super::body::read_body;
use super::error::HttpError;
use super::metrics::Route;
use super::response;
use super::status::http_status;
use super::trace;
use super::AppState;
use crate::api::{InferCall, ServeError};
use crate::model::config::ModelConfig;
use crate::model::openai::OpenAiEmbeddings;
use crate::model::outcome::ItemError;
use crate::model::tensor::{push_bytes_element, DataType, Tensor};
use crate::protocol::openai::{decode_embeddings, encode_embeddings, encode_error, encode_model, encode_models};
use crate::protocol::{clip, InferRequest, Parameters, RequestedOutput};
use crate::serving::items::Answer;
use crate::serving::{EdgeLabel, ModelStatus};
use crate::traces::RequestTrace;

/// Requests through OpenAI's routes, counted by their HTTP status.
pub static OPENAI_EDGE: EdgeLabel = EdgeLabel {
    name: "openai",
    status_name: None,
};

pub const EMBEDDINGS_ROUTE: &str = "/v1/embeddings";

/// A failure as OpenAI's clients read it: an HTTP status and the error object.
#[derive(Debug)]
struct OpenAiFailure {
    status: u16,
    message: String,
    param: Option<&'static str>,
    retry_after: Option<u64>,
}

impl OpenAiFailure {
    fn new(status: u16, message: impl Into<String>) -> Self {
        OpenAiFailure {
            status,
            message: message.into(),
            param: None,
            retry_after: None,
        }
    }
}

impl From<HttpError> for OpenAiFailure {
    fn from(error: HttpError) -> Self {
        let retry_after = match &error {
            HttpError::Serve(serve) => serve.retry_after().map(|d| d.as_secs()),
            _ => None,
        };
        OpenAiFailure {
            status: error.status(),
            message: error.to_string(),
            param: None,
            retry_after,
        }
    }
}

impl From<ServeError> for OpenAiFailure {
    fn from(error: ServeError) -> Self {
        HttpError::Serve(error).into()
    }
}

impl IntoResponse for OpenAiFailure {
    fn into_response(self) -> Response {
        let mut response = response::json(
            http_status(self.status),
            encode_error(self.status, &self.message, self.param),
        );
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

/// `POST /v1/embeddings`.
pub async fn embeddings(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    let mut trace = trace::start(&headers, EMBEDDINGS_ROUTE, || EMBEDDINGS_ROUTE.to_owned());
    let traceparent = trace.traceparent();
    let mut response = match handle(&state, &headers, body, &mut trace).await {
        Ok(response) => response,
        Err(failure) => failure.into_response(),
    };
    // Still here when the request failed before its call began.
    trace.finish(response.status().as_u16());
    trace::carry(&mut response, traceparent);
    if let Some(metrics) = &state.metrics {
        metrics.count("POST", Route::Fixed(EMBEDDINGS_ROUTE), response.status().as_u16());
    }
    response
}

async fn handle(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
    trace: &mut RequestTrace,
) -> Result<Response, OpenAiFailure> {
    let body = read_body(body, headers, state.max_body_bytes).await?;
    let request = decode_embeddings(&body).map_err(|bad| OpenAiFailure {
        param: bad.param,
        ..OpenAiFailure::new(400, bad.message)
    })?;
    drop(body);
    let call = InferCall::start(&state.repository, &OPENAI_EDGE, &request.model, None, trace.take())?;
    let result = answer(&call, request).instrument(call.span().clone()).await;
    call.answered(result.as_ref().map_or_else(|failure| failure.status, |_| 200));
    result
}

/// The answer to `request`. A failure of the inference itself is logged where it happens
/// (`InferCall::run`); the route's own refusals are logged here.
async fn answer(
    call: &InferCall,
    request: crate::protocol::openai::EmbeddingsRequest,
) -> Result<Response, OpenAiFailure> {
    let logged = |failure: OpenAiFailure| {
        call.failed(failure.status, &failure.message);
        failure
    };
    let model = call.config();
    let route = route_of(model).map_err(logged)?;
    let dimension = vector_size(model, &route);
    if let (Some(asked), Some(dimension)) = (request.dimensions, dimension) {
        if asked != dimension as u64 {
            return Err(logged(OpenAiFailure {
                param: Some("dimensions"),
                ..OpenAiFailure::new(
                    400,
                    format!(
                        "model '{}' answers vectors of {dimension} dimensions, not {asked}",
                        model.name
                    ),
                )
            }));
        }
    }
    let texts = request.texts.len();
    let inferred = call.run(infer_request(&route, request.texts)).await?;
    let outputs = outputs_of(inferred.answer)?;
    let vectors = outputs
        .iter()
        .find(|t| t.name == route.output)
        .ok_or_else(|| logged(OpenAiFailure::new(500, "the model answered no vectors")))?;
    let dimension = match vectors.shape.as_slice() {
        [rows, dimension] if *rows as usize == texts => *dimension as usize,
        shape => {
            return Err(logged(OpenAiFailure::new(
                500,
                format!("the model's vectors have shape {shape:?}, not [{texts}, D]"),
            )))
        }
    };
    let tokens: u64 = match &route.tokens {
        Some(name) => outputs
            .iter()
            .find(|t| &t.name == name)
            .map(|t| {
                t.data
                    .chunks_exact(8)
                    .map(|b| i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]).max(0) as u64)
                    .sum()
            })
            .unwrap_or(0),
        None => 0,
    };
    let body = encode_embeddings(&model.name, &vectors.data, dimension, request.encoding, tokens);
    Ok(response::json(StatusCode::OK, body))
}

/// The model's embeddings route, or why it has none.
fn route_of(model: &ModelConfig) -> Result<OpenAiEmbeddings, OpenAiFailure> {
    model.openai_embeddings.clone().ok_or_else(|| OpenAiFailure {
        param: Some("model"),
        ..OpenAiFailure::new(
            400,
            format!(
                "model '{}' is not served on /v1/embeddings (its model.toml declares no [openai.embeddings])",
                clip(&model.name)
            ),
        )
    })
}

/// The vector size the model declares, if fixed.
fn vector_size(model: &ModelConfig, route: &OpenAiEmbeddings) -> Option<usize> {
    let spec = model.outputs.iter().find(|s| s.name == route.output)?;
    match spec.shapes.as_slice() {
        [shape] => match shape.as_slice() {
            [d] if *d > 0 => Some(*d as usize),
            _ => None,
        },
        _ => None,
    }
}

/// The V2 request the texts become: one BYTES item per text, the route's outputs asked for.
fn infer_request(route: &OpenAiEmbeddings, texts: Vec<String>) -> InferRequest {
    let mut data = Vec::with_capacity(texts.iter().map(|t| t.len() + 4).sum());
    for text in &texts {
        push_bytes_element(&mut data, text.as_bytes());
    }
    let asked = |name: &str| RequestedOutput {
        name: name.to_string(),
        binary_data: None,
    };
    InferRequest {
        id: None,
        inputs: vec![Tensor {
            name: route.input.clone(),
            datatype: DataType::Bytes,
            shape: vec![texts.len() as u64],
            data,
        }],
        outputs: std::iter::once(asked(&route.output))
            .chain(route.tokens.as_deref().map(asked))
            .collect(),
        parameters: Parameters::default(),
    }
}

/// The outputs of an answer in which every item succeeded; else the first failed item's
/// status, its message naming its index.
fn outputs_of(answer: Answer) -> Result<Vec<Tensor>, OpenAiFailure> {
    let failed = |index: usize, error: ItemError| OpenAiFailure {
        param: Some("input"),
        ..OpenAiFailure::new(error.status, format!("input[{index}]: {}", error.message))
    };
    match answer {
        Answer::Success(outputs) => Ok(outputs),
        Answer::Failure(error) => Err(failed(0, error)),
        Answer::MultiStatus(outcomes) => {
            let (index, error) = outcomes
                .into_iter()
                .enumerate()
                .find_map(|(i, outcome)| outcome.err().map(|e| (i, e)))
                .unwrap_or((0, ItemError::trap("a multi-status answer without a failed item")));
            Err(failed(index, error))
        }
    }
}

/// `GET /v1/models`: the models served on OpenAI's routes, ready now.
pub async fn models(State(state): State<Arc<AppState>>) -> Response {
    let served: Vec<String> = state
        .repository
        .index()
        .into_iter()
        .filter(|(_, entry)| match &entry.status {
            ModelStatus::Ready { model, .. } => model.config.openai_embeddings.is_some(),
            ModelStatus::Standby(standby) => standby.config.openai_embeddings.is_some(),
            _ => false,
        })
        .map(|(name, _)| name)
        .collect();
    let names: Vec<&str> = served.iter().map(String::as_str).collect();
    response::json(StatusCode::OK, encode_models(&names))
}

/// `GET /v1/models/{model}`.
pub async fn model(State(state): State<Arc<AppState>>, Path(name): Path<String>) -> Response {
    match crate::api::find(&state.repository, &name, None) {
        Ok(model) if model.config().openai_embeddings.is_some() => {
            response::json(StatusCode::OK, encode_model(&model.config().name))
        }
        _ => OpenAiFailure {
            param: Some("model"),
            ..OpenAiFailure::new(404, format!("the model '{}' does not exist", clip(&name)))
        }
        .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_item_fails_the_request_naming_its_index() {
        let vectors = || {
            vec![Tensor {
                name: "embedding".into(),
                datatype: DataType::Fp32,
                shape: vec![1],
                data: 1f32.to_le_bytes().to_vec(),
            }]
        };
        let several = Answer::MultiStatus(vec![
            Ok(vectors()),
            Ok(vectors()),
            Err(ItemError::new(422, "text is 300 tokens long")),
            Err(ItemError::trap("boom")),
        ]);
        let failure = outputs_of(several).unwrap_err();
        assert_eq!((failure.status, failure.param), (422, Some("input")));
        assert_eq!(failure.message, "input[2]: text is 300 tokens long");
        let lone = outputs_of(Answer::Failure(ItemError::new(400, "not UTF-8"))).unwrap_err();
        assert_eq!((lone.status, lone.message.as_str()), (400, "input[0]: not UTF-8"));
        assert_eq!(outputs_of(Answer::Success(vectors())).unwrap(), vectors());
    }

    #[test]
    fn texts_become_one_bytes_item_each_with_the_routes_outputs() {
        let route = OpenAiEmbeddings {
            input: "text".into(),
            output: "embedding".into(),
            tokens: Some("tokens".into()),
        };
        let request = infer_request(&route, vec!["a".into(), "".into(), "ünï".into()]);
        let input = &request.inputs[0];
        assert_eq!(
            (input.name.as_str(), input.datatype, input.shape.clone()),
            ("text", DataType::Bytes, vec![3])
        );
        input.validate().unwrap();
        let asked: Vec<&str> = request.outputs.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(asked, ["embedding", "tokens"]);
    }
}
