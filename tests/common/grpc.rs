//! What the gRPC tests share: the connection to a server's gRPC port and the requests
//! they send, built once here.

use std::net::SocketAddr;

use tensorplug::protocol::grpc::proto::grpc_inference_service_client::GrpcInferenceServiceClient;
use tensorplug::protocol::grpc::proto::model_infer_request::InferInputTensor;
use tensorplug::protocol::grpc::proto::{InferTensorContents, ModelInferRequest};
use tonic::transport::{Channel, Endpoint};

use super::TestServer;

/// The HTTP/2 path of `ModelInfer`, for raw calls.
pub const MODEL_INFER: &str = "/inference.GRPCInferenceService/ModelInfer";

/// The gRPC port at `address`, not yet connected (to set a timeout or a limit first).
pub fn endpoint(address: SocketAddr) -> Endpoint {
    Channel::from_shared(format!("http://{address}")).expect("endpoint")
}

/// A connection to the gRPC port at `address`.
pub async fn channel(address: SocketAddr) -> Channel {
    endpoint(address).connect().await.expect("connect over gRPC")
}

/// An inference client on a connection to the gRPC port at `address`.
pub async fn client(address: SocketAddr) -> GrpcInferenceServiceClient<Channel> {
    GrpcInferenceServiceClient::new(channel(address).await)
}

impl TestServer {
    /// An inference client on a fresh connection to this server's gRPC port.
    pub async fn grpc_client(&self) -> GrpcInferenceServiceClient<Channel> {
        client(self.grpc_address()).await
    }
}

/// A request to the faulty model: one item per value (`x: FP32 [N, 1]`; negative values
/// are its fault codes), as typed contents.
pub fn faulty_request(values: &[f32]) -> ModelInferRequest {
    ModelInferRequest {
        model_name: "faulty".into(),
        inputs: vec![InferInputTensor {
            name: "x".into(),
            datatype: "FP32".into(),
            shape: vec![values.len() as i64, 1],
            contents: Some(InferTensorContents {
                fp32_contents: values.to_vec(),
                ..Default::default()
            }),
            ..Default::default()
        }],
        ..Default::default()
    }
}
