//! gRPC: `inference.GRPCInferenceService/ModelInfer` through the client generated from
//! the same `.proto` as the server ([`crate::protocol::grpc`]), over one HTTP/2 channel
//! that every worker shares. Inputs travel as `raw_input_contents` (the tensors' bytes as
//! they are), outputs come back in `raw_output_contents` (typed `contents` are read too,
//! for other servers).
//!
//! gRPC has no 207: a request whose items partly failed answers a non-OK status with
//! every item's status in the `tensorplug-item-status` trailer (see docs/api.md, "Partial
//! failure over gRPC"), and without the successful items' outputs. That becomes a
//! [`Reply::Statuses`]: each line gets its own outcome, and the lines whose items all
//! succeeded are sent again (see the worker).

use std::time::Duration;

use tonic::metadata::{AsciiMetadataKey, AsciiMetadataValue};
use tonic::transport::{Channel, Endpoint};
use tonic::Code;

use super::{base_url, parse_headers, setup_backoff, Failure, ModelInfo, Reply, SetupError};
use crate::batch::options::Options;
use crate::protocol::client::ServerAnswer;
use crate::protocol::grpc::proto::grpc_inference_service_client::GrpcInferenceServiceClient;
use crate::protocol::grpc::proto::{ModelInferResponse, ModelMetadataRequest};
use crate::protocol::grpc::{answered_status, read_item_statuses, read_response, write_request};
use crate::protocol::InferRequest;
use crate::traces::ClientTrace;

/// Largest message either way (the client's own limit; the server has its own).
const MAX_MESSAGE_BYTES: usize = 1 << 30;

pub(crate) struct Grpc {
    pub info: ModelInfo,
    client: GrpcInferenceServiceClient<Channel>,
    model: String,
    version: String,
    metadata: Vec<(AsciiMetadataKey, AsciiMetadataValue)>,
    timeout: Duration,
}

impl Grpc {
    /// A client for `url` (`host:port` or `http://host:port`), after the model's
    /// metadata says it is served.
    pub(crate) async fn connect(url: &str, options: &Options) -> Result<Grpc, SetupError> {
        let base = base_url(url);
        let endpoint = Endpoint::from_shared(base.clone())
            .map_err(|e| SetupError::Usage(format!("--url {url:?} is not a gRPC address: {e}")))?
            .connect_timeout(options.timeout.min(Duration::from_secs(10)))
            .tcp_nodelay(true);
        let client = GrpcInferenceServiceClient::new(endpoint.connect_lazy())
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        let mut metadata = Vec::new();
        for (name, value) in parse_headers(&options.headers)? {
            let key = AsciiMetadataKey::from_bytes(name.to_ascii_lowercase().as_bytes()).map_err(|e| {
                SetupError::Usage(format!("--request-headers: {name:?} is not a gRPC metadata key: {e}"))
            })?;
            let value = AsciiMetadataValue::try_from(value.as_str())
                .map_err(|e| SetupError::Usage(format!("--request-headers: {value:?} is not a metadata value: {e}")))?;
            metadata.push((key, value));
        }
        let mut grpc = Grpc {
            info: ModelInfo {
                name: options.model.clone(),
                version: String::new(),
                batches: false,
            },
            client,
            model: options.model.clone(),
            version: options.model_version.clone().unwrap_or_default(),
            metadata,
            timeout: options.timeout,
        };
        grpc.info = grpc.metadata(&base, options).await?;
        Ok(grpc)
    }

    fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        request.set_timeout(self.timeout);
        for (key, value) in &self.metadata {
            request.metadata_mut().append(key.clone(), value.clone());
        }
        request
    }

    /// The model's metadata, retried while the server is unavailable.
    async fn metadata(&self, url: &str, options: &Options) -> Result<ModelInfo, SetupError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let request = self.request(ModelMetadataRequest {
                name: self.model.clone(),
                version: self.version.clone(),
            });
            let mut client = self.client.clone();
            let status = match tokio::time::timeout(self.timeout, client.model_metadata(request)).await {
                Ok(Ok(response)) => {
                    let metadata = response.into_inner();
                    return Ok(ModelInfo {
                        name: if metadata.name.is_empty() {
                            self.model.clone()
                        } else {
                            metadata.name
                        },
                        version: options
                            .model_version
                            .clone()
                            .or_else(|| metadata.versions.into_iter().next())
                            .unwrap_or_default(),
                        batches: !metadata.inputs.is_empty()
                            && metadata.inputs.iter().all(|i| i.shape.first() == Some(&-1)),
                    });
                }
                Ok(Err(status)) => status,
                Err(_) => tonic::Status::deadline_exceeded("no answer within --timeout"),
            };
            let retryable = matches!(status.code(), Code::Unavailable | Code::DeadlineExceeded);
            if !retryable || attempt > options.retries {
                let reason = format!("{:?}: {}", status.code(), status.message());
                return Err(if status.code() == Code::Unavailable {
                    SetupError::Unreachable {
                        url: url.to_owned(),
                        reason,
                    }
                } else {
                    SetupError::Model {
                        url: url.to_owned(),
                        reason,
                    }
                });
            }
            tracing::info!("model metadata: {:?}: {} (retrying)", status.code(), status.message());
            setup_backoff(attempt).await;
        }
    }

    pub(crate) async fn infer(&self, request: InferRequest, trace: &ClientTrace) -> Result<Reply, Failure> {
        let message = write_request(request, &self.model, &self.version);
        let mut client = self.client.clone();
        let mut request = self.request(message);
        if let Some(traceparent) = trace.traceparent().and_then(|t| AsciiMetadataValue::try_from(t).ok()) {
            request.metadata_mut().insert("traceparent", traceparent);
        }
        let call = client.model_infer(request);
        match tokio::time::timeout(self.timeout, call).await {
            Err(_) => Err(Failure::timed_out(self.timeout)),
            Ok(Ok(response)) => reply(response.into_inner()),
            Ok(Err(status)) => match read_item_statuses(&status) {
                Some(results) => Ok(Reply::Statuses { results }),
                None => Err(Failure::answered(
                    answered_status(status.code()),
                    status.message().to_owned(),
                    None,
                )),
            },
        }
    }
}

/// A successful answer's outputs (a response message is always a success: a failed call
/// is a status, see `infer`).
fn reply(response: ModelInferResponse) -> Result<Reply, Failure> {
    let unreadable =
        |reason: String| Failure::no_answer(format!("the server's answer could not be read: {reason}"), false);
    let answer = read_response(response).map_err(|e| unreadable(e.to_string()))?;
    let ServerAnswer::Success {
        model_name,
        model_version,
        outputs,
        ..
    } = answer
    else {
        return Err(unreadable(String::from("not a success")));
    };
    Ok(Reply::Success {
        model_name,
        model_version,
        outputs,
    })
}
