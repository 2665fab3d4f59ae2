//! REST: `POST /v2/models/{m}[/versions/{v}]/infer` over HTTP/1.1 (reqwest, a pool of
//! kept-alive connections, one per worker), bodies as JSON or, with `--binary-data`, as
//! binary tensor data (inputs after the JSON, outputs asked for as binary too).

use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};

use super::{base_url, parse_headers, rest_reply, setup_backoff, Failure, ModelInfo, Reply, SetupError};
use crate::batch::options::Options;
use crate::batch::retry::parse_retry_after;
use crate::protocol::client::{decode_answer, encode_request, BodyForm, ServerAnswer};
use crate::protocol::InferRequest;
use crate::traces::ClientTrace;

/// The binary tensor data extension's header: the JSON part's length.
const HEADER_CONTENT_LENGTH: &str = "inference-header-content-length";

pub(crate) struct Rest {
    pub info: ModelInfo,
    client: reqwest::Client,
    infer_url: reqwest::Url,
    form: BodyForm,
    timeout: Duration,
}

impl Rest {
    /// A client for `url`, after the model's metadata says it is served.
    pub(crate) async fn connect(url: &str, options: &Options) -> Result<Rest, SetupError> {
        let base = base_url(url);
        let mut headers = HeaderMap::new();
        for (name, value) in parse_headers(&options.headers)? {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|e| SetupError::Usage(format!("--request-headers: {name:?} is not a header name: {e}")))?;
            let value = HeaderValue::from_str(&value)
                .map_err(|e| SetupError::Usage(format!("--request-headers: {value:?} is not a header value: {e}")))?;
            headers.append(name, value);
        }
        let client = reqwest::Client::builder()
            .timeout(options.timeout)
            .pool_max_idle_per_host(options.workers)
            .default_headers(headers)
            .build()
            .map_err(|e| SetupError::Usage(format!("the HTTP client could not be set up: {}", chain(&e))))?;
        let mut model_url = reqwest::Url::parse(&base)
            .map_err(|e| SetupError::Usage(format!("--url {url:?} is not a URL (nor host:port): {e}")))?;
        {
            let mut segments = model_url
                .path_segments_mut()
                .map_err(|()| SetupError::Usage(format!("--url {url:?} cannot take a path")))?;
            segments.pop_if_empty().extend(["v2", "models", &options.model]);
            if let Some(version) = &options.model_version {
                segments.extend(["versions", version]);
            }
        }
        let mut infer_url = model_url.clone();
        if let Ok(mut segments) = infer_url.path_segments_mut() {
            segments.push("infer");
        }
        let info = metadata(&client, &model_url, options).await?;
        Ok(Rest {
            info,
            client,
            infer_url,
            form: BodyForm {
                binary_inputs: options.binary_data,
                binary_outputs: options.binary_data,
            },
            timeout: options.timeout,
        })
    }

    pub(crate) async fn infer(&self, request: InferRequest, trace: &ClientTrace) -> Result<Reply, Failure> {
        let encoded = encode_request(&request, self.form);
        drop(request);
        let mut post = self.client.post(self.infer_url.clone());
        if let Some(traceparent) = trace.traceparent() {
            post = post.header("traceparent", traceparent);
        }
        post = match encoded.json_header_len {
            Some(len) => post
                .header(CONTENT_TYPE, "application/octet-stream")
                .header(HEADER_CONTENT_LENGTH, len),
            None => post.header(CONTENT_TYPE, "application/json"),
        };
        let response = post.body(encoded.body).send().await.map_err(|e| self.failed(&e))?;
        let status = response.status().as_u16();
        let headers = response.headers();
        let retry_after = headers
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_retry_after);
        let json_header_len = headers
            .get(HEADER_CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse().ok());
        let body = response.bytes().await.map_err(|e| self.failed(&e))?;
        rest_reply(status, &body, json_header_len, retry_after)
    }

    /// A request that got no answer: timed out, or the connection failed (both retried).
    fn failed(&self, error: &reqwest::Error) -> Failure {
        if error.is_timeout() {
            Failure::timed_out(self.timeout)
        } else {
            Failure::no_answer(format!("no answer from {}: {}", self.infer_url, chain(error)), true)
        }
    }
}

/// The parts of `GET /v2/models/{m}` the run reads (other V2 servers may leave out the
/// rest).
#[derive(serde::Deserialize)]
struct Metadata {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    versions: Vec<String>,
    #[serde(default)]
    inputs: Vec<InputMetadata>,
}

#[derive(serde::Deserialize)]
struct InputMetadata {
    #[serde(default)]
    shape: Vec<i64>,
}

/// The model's metadata, retried while the server cannot be reached or answers 503.
async fn metadata(client: &reqwest::Client, url: &reqwest::Url, options: &Options) -> Result<ModelInfo, SetupError> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let last = attempt > options.retries;
        let unreachable = |reason: String| SetupError::Unreachable {
            url: url.to_string(),
            reason,
        };
        match client.get(url.clone()).send().await {
            Err(error) if last => return Err(unreachable(chain(&error))),
            Err(error) => tracing::info!("model metadata: {} (retrying)", chain(&error)),
            Ok(response) => {
                let status = response.status();
                let body = response.bytes().await.map_err(|e| unreachable(chain(&e)))?;
                if status.is_success() {
                    let metadata: Metadata = serde_json::from_slice(&body).map_err(|e| SetupError::Model {
                        url: url.to_string(),
                        reason: format!("its metadata could not be read: {e}"),
                    })?;
                    return Ok(info(metadata, options));
                }
                let message = match decode_answer(status.as_u16(), &body, None) {
                    Ok(ServerAnswer::Error { message }) => message,
                    _ => String::new(),
                };
                if status.as_u16() != 503 || last {
                    return Err(SetupError::Model {
                        url: url.to_string(),
                        reason: format!("HTTP {status}: {message}"),
                    });
                }
                tracing::info!("model metadata: HTTP {status}: {message} (retrying)");
            }
        }
        setup_backoff(attempt).await;
    }
}

fn info(metadata: Metadata, options: &Options) -> ModelInfo {
    ModelInfo {
        name: metadata.name.unwrap_or_else(|| options.model.clone()),
        version: options
            .model_version
            .clone()
            .or_else(|| metadata.versions.into_iter().next())
            .unwrap_or_default(),
        batches: !metadata.inputs.is_empty() && metadata.inputs.iter().all(|i| i.shape.first() == Some(&-1)),
    }
}

/// An error and its causes, as one line.
pub(super) fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let line = cause.to_string();
        if !text.contains(&line) {
            text.push_str(": ");
            text.push_str(&line);
        }
        source = cause.source();
    }
    text
}
