//! The floor over gRPC: `ModelInfer` through the gRPC edge's own server (and its checked
//! codec), read and answered by tensorplug's own gRPC conversions, with zeros of the
//! model's output shapes; every other call is unimplemented.

use std::pin::Pin;
use std::sync::Arc;

use tensorplug::grpc::server::grpc_inference_service_server::{GrpcInferenceService, GrpcInferenceServiceServer};
use tensorplug::protocol::grpc::proto::*;
use tensorplug::protocol::grpc::{read_request, write_response};
use tokio::net::TcpListener;
use tonic::{Request, Response, Status, Streaming};

use crate::answer::{batch_size, Shapes};

pub async fn serve(listener: TcpListener, shapes: Arc<Shapes>) {
    let service = GrpcInferenceServiceServer::new(Floor { shapes }).max_decoding_message_size(64 << 20);
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    if let Err(error) = tonic::transport::Server::builder()
        .add_service(service)
        .serve_with_incoming(incoming)
        .await
    {
        eprintln!("tensorplug-floor: gRPC: {error}");
    }
}

struct Floor {
    shapes: Arc<Shapes>,
}

fn unimplemented<T>() -> Result<Response<T>, Status> {
    Err(Status::unimplemented("the floor serves ModelInfer only"))
}

type Stream =
    Pin<Box<dyn tonic::codegen::tokio_stream::Stream<Item = Result<ModelStreamInferResponse, Status>> + Send>>;

#[tonic::async_trait]
impl GrpcInferenceService for Floor {
    async fn model_infer(&self, request: Request<ModelInferRequest>) -> Result<Response<ModelInferResponse>, Status> {
        let request = read_request(request.into_inner()).map_err(|e| Status::invalid_argument(e.to_string()))?;
        let outputs = self.shapes.outputs(batch_size(&request));
        Ok(Response::new(write_response(
            self.shapes.name().to_owned(),
            self.shapes.version().to_owned(),
            request.id.clone(),
            outputs,
        )))
    }

    async fn server_live(&self, _: Request<ServerLiveRequest>) -> Result<Response<ServerLiveResponse>, Status> {
        Ok(Response::new(ServerLiveResponse { live: true }))
    }
    async fn server_ready(&self, _: Request<ServerReadyRequest>) -> Result<Response<ServerReadyResponse>, Status> {
        Ok(Response::new(ServerReadyResponse { ready: true }))
    }
    async fn model_ready(&self, _: Request<ModelReadyRequest>) -> Result<Response<ModelReadyResponse>, Status> {
        unimplemented()
    }
    async fn server_metadata(
        &self,
        _: Request<ServerMetadataRequest>,
    ) -> Result<Response<ServerMetadataResponse>, Status> {
        unimplemented()
    }
    async fn model_metadata(
        &self,
        _: Request<ModelMetadataRequest>,
    ) -> Result<Response<ModelMetadataResponse>, Status> {
        unimplemented()
    }
    type ModelStreamInferStream = Stream;
    async fn model_stream_infer(
        &self,
        _: Request<Streaming<ModelInferRequest>>,
    ) -> Result<Response<Self::ModelStreamInferStream>, Status> {
        unimplemented()
    }
    async fn model_statistics(
        &self,
        _: Request<ModelStatisticsRequest>,
    ) -> Result<Response<ModelStatisticsResponse>, Status> {
        unimplemented()
    }
    async fn repository_index(
        &self,
        _: Request<RepositoryIndexRequest>,
    ) -> Result<Response<RepositoryIndexResponse>, Status> {
        unimplemented()
    }
    async fn repository_model_load(
        &self,
        _: Request<RepositoryModelLoadRequest>,
    ) -> Result<Response<RepositoryModelLoadResponse>, Status> {
        unimplemented()
    }
    async fn repository_model_unload(
        &self,
        _: Request<RepositoryModelUnloadRequest>,
    ) -> Result<Response<RepositoryModelUnloadResponse>, Status> {
        unimplemented()
    }
}
