//! gRPC: `inference.GRPCInferenceService/ModelInfer` through the client generated from
//! the same `.proto` as the server, over one HTTP/2 channel that every worker shares.
//! Inputs travel as `raw_input_contents` (the tensors' bytes as they are), outputs come
//! back in `raw_output_contents` (typed `contents` are read too, for other servers).
//!
//! gRPC has no 207: a request whose items partly failed answers a non-OK status with
//! every item's status in the `tensorplug-item-status` trailer (see the README's "Partial
//! failure over gRPC"), and without the successful items' outputs. That becomes a
//! [`Reply::Statuses`]: each line gets its own outcome, and the lines whose items all
//! succeeded are sent again (see the worker). Item messages in the trailer are cut to
//! 200 bytes by the server.

use std::collections::HashMap;
use std::time::Duration;

use tonic::metadata::{AsciiMetadataKey, AsciiMetadataValue};
use tonic::transport::{Channel, Endpoint};
use tonic::Code;

use super::{base_url, parse_headers, setup_backoff, Failure, ModelInfo, Reply, SetupError};
use crate::batch::Options;
use crate::grpc::proto::grpc_inference_service_client::GrpcInferenceServiceClient;
use crate::grpc::proto::infer_parameter::ParameterChoice;
use crate::grpc::proto::model_infer_request::{InferInputTensor, InferRequestedOutputTensor};
use crate::grpc::proto::model_infer_response::InferOutputTensor;
use crate::grpc::proto::{
    InferParameter, InferTensorContents, ModelInferRequest, ModelInferResponse, ModelMetadataRequest,
};
use crate::model::outcome::ItemError;
use crate::model::tensor::{push_bytes_element, DataType, Tensor};
use crate::protocol::{InferRequest, ParameterValue, Parameters};

/// The trailer of a partly failed multi-item answer (the server's `ITEM_STATUS_TRAILER`).
const ITEM_STATUS_TRAILER: &str = "tensorplug-item-status";
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

    pub(crate) async fn infer(&self, request: InferRequest) -> Result<Reply, Failure> {
        let message = self.message(request);
        let mut client = self.client.clone();
        let call = client.model_infer(self.request(message));
        match tokio::time::timeout(self.timeout, call).await {
            Err(_) => Err(Failure::timed_out(self.timeout)),
            Ok(Ok(response)) => reply(response.into_inner()),
            Ok(Err(status)) => match item_statuses(&status) {
                Some(results) => Ok(Reply::Statuses { results }),
                None => Err(Failure::answered(
                    http_status(status.code()),
                    status.message().to_owned(),
                    None,
                )),
            },
        }
    }

    /// `request` as a `ModelInferRequest` with raw contents.
    fn message(&self, request: InferRequest) -> ModelInferRequest {
        let mut raw_input_contents = Vec::with_capacity(request.inputs.len());
        let inputs = request
            .inputs
            .into_iter()
            .map(|tensor| {
                raw_input_contents.push(tensor.data);
                InferInputTensor {
                    name: tensor.name,
                    datatype: tensor.datatype.as_str().to_owned(),
                    shape: tensor
                        .shape
                        .iter()
                        .map(|&d| i64::try_from(d).unwrap_or(i64::MAX))
                        .collect(),
                    parameters: HashMap::new(),
                    contents: None,
                }
            })
            .collect();
        ModelInferRequest {
            model_name: self.model.clone(),
            model_version: self.version.clone(),
            id: request.id.unwrap_or_default(),
            parameters: parameters(&request.parameters),
            inputs,
            outputs: request
                .outputs
                .into_iter()
                .map(|o| InferRequestedOutputTensor {
                    name: o.name,
                    parameters: HashMap::new(),
                })
                .collect(),
            raw_input_contents,
        }
    }
}

/// Request parameters as protobuf values (binary-output choices mean nothing here).
fn parameters(parameters: &Parameters) -> HashMap<String, InferParameter> {
    parameters
        .iter()
        .filter(|(name, _)| *name != "binary_data_output")
        .filter_map(|(name, value)| {
            let choice = match value {
                ParameterValue::Bool(b) => ParameterChoice::BoolParam(*b),
                ParameterValue::String(s) => ParameterChoice::StringParam(s.clone()),
                ParameterValue::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
                    (Some(i), _, _) => ParameterChoice::Int64Param(i),
                    (None, Some(u), _) => ParameterChoice::Uint64Param(u),
                    (None, None, Some(f)) => ParameterChoice::DoubleParam(f),
                    (None, None, None) => return None,
                },
                ParameterValue::Null | ParameterValue::Structured => return None,
            };
            Some((
                name.to_owned(),
                InferParameter {
                    parameter_choice: Some(choice),
                },
            ))
        })
        .collect()
}

/// A successful answer's outputs.
fn reply(response: ModelInferResponse) -> Result<Reply, Failure> {
    let ModelInferResponse {
        model_name,
        model_version,
        outputs,
        raw_output_contents,
        ..
    } = response;
    let unreadable =
        |reason: String| Failure::no_answer(format!("the server's answer could not be read: {reason}"), false);
    if !raw_output_contents.is_empty() && raw_output_contents.len() != outputs.len() {
        return Err(unreadable(format!(
            "{} raw_output_contents for {} outputs",
            raw_output_contents.len(),
            outputs.len()
        )));
    }
    let mut raw = raw_output_contents.into_iter();
    let tensors = outputs
        .into_iter()
        .map(|output| output_tensor(output, raw.next()).map_err(&unreadable))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Reply::Success {
        model_name,
        model_version,
        outputs: tensors,
    })
}

fn output_tensor(output: InferOutputTensor, raw: Option<Vec<u8>>) -> Result<Tensor, String> {
    let datatype = DataType::parse(&output.datatype).ok_or_else(|| {
        format!(
            "output '{}': datatype {:?} is not a V2 datatype",
            output.name, output.datatype
        )
    })?;
    let shape = output
        .shape
        .iter()
        .map(|&d| u64::try_from(d).map_err(|_| format!("output '{}': negative dimension {d}", output.name)))
        .collect::<Result<Vec<u64>, String>>()?;
    let data = match raw {
        Some(bytes) => bytes,
        None => typed_bytes(datatype, output.contents.unwrap_or_default()),
    };
    let tensor = Tensor {
        name: output.name,
        datatype,
        shape,
        data,
    };
    tensor.validate().map_err(|e| e.to_string())?;
    Ok(tensor)
}

/// Typed contents as tensor bytes (little-endian; BYTES length-prefixed).
fn typed_bytes(datatype: DataType, c: InferTensorContents) -> Vec<u8> {
    use DataType as D;
    match datatype {
        D::Bool => c.bool_contents.into_iter().map(u8::from).collect(),
        D::Int8 => c
            .int_contents
            .into_iter()
            .flat_map(|v| (v as i8).to_le_bytes())
            .collect(),
        D::Int16 => c
            .int_contents
            .into_iter()
            .flat_map(|v| (v as i16).to_le_bytes())
            .collect(),
        D::Int32 => c.int_contents.into_iter().flat_map(i32::to_le_bytes).collect(),
        D::Int64 => c.int64_contents.into_iter().flat_map(i64::to_le_bytes).collect(),
        D::Uint8 => c
            .uint_contents
            .into_iter()
            .flat_map(|v| (v as u8).to_le_bytes())
            .collect(),
        D::Uint16 => c
            .uint_contents
            .into_iter()
            .flat_map(|v| (v as u16).to_le_bytes())
            .collect(),
        D::Uint32 => c.uint_contents.into_iter().flat_map(u32::to_le_bytes).collect(),
        D::Uint64 => c.uint64_contents.into_iter().flat_map(u64::to_le_bytes).collect(),
        D::Fp32 => c.fp32_contents.into_iter().flat_map(f32::to_le_bytes).collect(),
        D::Fp64 => c.fp64_contents.into_iter().flat_map(f64::to_le_bytes).collect(),
        D::Bytes => {
            let mut bytes = Vec::new();
            for element in &c.bytes_contents {
                push_bytes_element(&mut bytes, element);
            }
            bytes
        }
        // No typed field: only raw contents can carry it.
        D::Fp16 => Vec::new(),
    }
}

/// Every item's status from a partly failed answer's trailer, if it has one (entries
/// with a `count` stand for that many items in a row; see the server's trailer).
fn item_statuses(status: &tonic::Status) -> Option<Vec<Result<(), ItemError>>> {
    #[derive(serde::Deserialize)]
    struct ItemStatus {
        status: u16,
        #[serde(default)]
        error: Option<String>,
        #[serde(default)]
        count: Option<usize>,
    }
    let trailer = status.metadata().get(ITEM_STATUS_TRAILER)?.to_str().ok()?;
    let items: Vec<ItemStatus> = serde_json::from_str(trailer).ok()?;
    let mut statuses = Vec::with_capacity(items.len());
    for item in items {
        let outcome = match item.status {
            200 => Ok(()),
            code => Err(ItemError::new(
                code,
                item.error.unwrap_or_else(|| {
                    format!("item failed ({code}); the server's trailer had no room for its message")
                }),
            )),
        };
        // Never more entries than a request has items (a request is bounded; a count is not).
        let count = item
            .count
            .unwrap_or(1)
            .min(MAX_TRAILER_ITEMS.saturating_sub(statuses.len()));
        statuses.extend(std::iter::repeat_n(outcome, count));
    }
    Some(statuses)
}

/// Most items a trailer is read as covering.
const MAX_TRAILER_ITEMS: usize = 1 << 24;

/// The HTTP status a gRPC code stands for (the server's mapping, read backwards).
fn http_status(code: Code) -> u16 {
    match code {
        Code::Ok => 200,
        Code::InvalidArgument | Code::OutOfRange | Code::FailedPrecondition => 400,
        Code::Unauthenticated => 401,
        Code::PermissionDenied => 403,
        Code::NotFound => 404,
        Code::AlreadyExists | Code::Aborted => 409,
        Code::ResourceExhausted => 413,
        Code::Unimplemented => 501,
        Code::Unavailable => 503,
        Code::DeadlineExceeded => 504,
        Code::Cancelled | Code::Unknown | Code::Internal | Code::DataLoss => 500,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_back_to_the_statuses_the_server_maps_from() {
        assert_eq!(http_status(Code::InvalidArgument), 400);
        assert_eq!(http_status(Code::Unavailable), 503);
        assert_eq!(http_status(Code::DeadlineExceeded), 504);
        assert_eq!(http_status(Code::Internal), 500);
        assert_eq!(http_status(Code::NotFound), 404);
    }

    #[test]
    fn the_item_status_trailer_gives_each_item_its_outcome() {
        let mut status = tonic::Status::invalid_argument("1 of 2 items failed");
        status.metadata_mut().insert(
            ITEM_STATUS_TRAILER,
            r#"[{"status":200},{"status":422,"error":"rejected"},{"status":500}]"#
                .parse()
                .unwrap(),
        );
        let items = item_statuses(&status).unwrap();
        assert_eq!(items[0], Ok(()));
        assert_eq!(items[1], Err(ItemError::new(422, "rejected")));
        assert_eq!(items[2].as_ref().unwrap_err().status, 500);
        assert!(item_statuses(&tonic::Status::internal("x")).is_none());
    }

    #[test]
    fn raw_and_typed_outputs_read_the_same() {
        let typed = InferOutputTensor {
            name: "y".into(),
            datatype: "INT16".into(),
            shape: vec![2],
            parameters: HashMap::new(),
            contents: Some(InferTensorContents {
                int_contents: vec![-2, 7],
                ..Default::default()
            }),
        };
        let from_typed = output_tensor(typed.clone(), None).unwrap();
        let from_raw = output_tensor(typed, Some([(-2i16).to_le_bytes(), 7i16.to_le_bytes()].concat())).unwrap();
        assert_eq!(from_typed, from_raw);
        let short = InferOutputTensor {
            name: "y".into(),
            datatype: "FP32".into(),
            shape: vec![2],
            parameters: HashMap::new(),
            contents: None,
        };
        assert!(output_tensor(short, Some(vec![0; 4])).is_err());
    }
}
