//! `inference.GRPCInferenceService`: each RPC asks [`crate::api`] what the matching REST
//! route asks it.

use std::pin::Pin;
use std::sync::Arc;

use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status, Streaming};
use tracing::Instrument;

use super::convert;
use super::proto::grpc_inference_service_server::GrpcInferenceService;
use super::proto::repository_index_response::ModelIndex;
use super::proto::{
    InferStatistics, ModelInferRequest, ModelInferResponse, ModelMetadataRequest, ModelMetadataResponse,
    ModelReadyRequest, ModelReadyResponse, ModelStatistics, ModelStatisticsRequest, ModelStatisticsResponse,
    ModelStreamInferResponse, RepositoryIndexRequest, RepositoryIndexResponse, RepositoryModelLoadRequest,
    RepositoryModelLoadResponse, RepositoryModelUnloadRequest, RepositoryModelUnloadResponse, ServerLiveRequest,
    ServerLiveResponse, ServerMetadataRequest, ServerMetadataResponse, ServerReadyRequest, ServerReadyResponse,
    StatisticDuration,
};
use super::status::{item_status, multi_status, status_of};
use crate::api::repository::{self, Change, RepositoryAccess};
use crate::api::{self, ServeError};
use crate::protocol::{clip, OutputOptions};
use crate::serving::items::Answer;
use crate::serving::{ModelState, ModelStatus, Repository};

/// The service, over the server's repository.
pub struct Inference {
    repository: Arc<Repository>,
    access: RepositoryAccess,
}

impl Inference {
    pub fn new(repository: Arc<Repository>, access: RepositoryAccess) -> Self {
        Self { repository, access }
    }

    /// Loads or unloads a model under the REST edge's rules, the token from `metadata`.
    async fn change(&self, metadata: &tonic::metadata::MetadataMap, name: &str, change: Change) -> Result<(), Status> {
        repository::change(&self.repository, &self.access, bearer(metadata), name, change)
            .await
            .map_err(|e| status_of(&e))
    }

    /// One inference call, from message to message.
    async fn infer(&self, message: ModelInferRequest) -> Result<ModelInferResponse, Status> {
        // A debug span, as on the REST edge; the lines logged at the default level carry
        // the model (and id) themselves.
        let span = tracing::debug_span!(
            "infer",
            edge = "grpc",
            model = %clip(&message.model_name),
            id = tracing::field::Empty,
            items = tracing::field::Empty
        );
        infer(&self.repository, message).instrument(span).await
    }
}

fn version(text: &str) -> Option<&str> {
    (!text.is_empty()).then_some(text)
}

/// The bearer token the caller presents in its `authorization` metadata, if any.
fn bearer(metadata: &MetadataMap) -> Option<&str> {
    metadata
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
}

/// Logs a request-level failure (failed items are logged where they are answered) and
/// answers its status.
fn refused(model: &str, error: ServeError) -> Status {
    let status = status_of(&error);
    tracing::info!(model = %clip(model), code = ?status.code(), "request failed: {error}");
    status
}

async fn infer(repository: &Repository, message: ModelInferRequest) -> Result<ModelInferResponse, Status> {
    let name = message.model_name.clone();
    let model = api::find_model(repository, &name, version(&message.model_version)).map_err(|e| refused(&name, e))?;
    let request = convert::request(message).map_err(|e| refused(&name, e))?;
    let span = tracing::Span::current();
    if let Some(id) = &request.id {
        span.record("id", &*clip(id));
    }
    let options = OutputOptions::from_request(&request);
    let id = request.id.clone();
    let inference = api::infer(&model, request).await.map_err(|e| refused(&name, e))?;
    span.record("items", inference.items);
    let (model_name, quoted_id) = (model.config.name.as_str(), id.as_deref().map(clip));
    match inference.answer {
        Answer::Success(outputs) => Ok(convert::response(&model, id.clone(), options.filter(outputs))),
        Answer::Failure(error) => {
            let status = item_status(&error);
            tracing::info!(
                model = model_name,
                id = quoted_id.as_deref(),
                status = error.status,
                "item failed: {}",
                error.message
            );
            Err(status)
        }
        Answer::MultiStatus(outcomes) => {
            let failed = outcomes.iter().filter(|o| o.is_err()).count();
            tracing::info!(
                model = model_name,
                id = quoted_id.as_deref(),
                failed,
                items = outcomes.len(),
                "multi-status answer"
            );
            Err(multi_status(&outcomes))
        }
    }
}

type InferStream = Pin<Box<dyn Stream<Item = Result<ModelStreamInferResponse, Status>> + Send>>;

#[tonic::async_trait]
impl GrpcInferenceService for Inference {
    async fn server_live(&self, _: Request<ServerLiveRequest>) -> Result<Response<ServerLiveResponse>, Status> {
        Ok(Response::new(ServerLiveResponse { live: true }))
    }

    async fn server_ready(&self, _: Request<ServerReadyRequest>) -> Result<Response<ServerReadyResponse>, Status> {
        Ok(Response::new(ServerReadyResponse {
            ready: self.repository.all_ready(),
        }))
    }

    /// Ready or not for a model the server knows (loading: not ready); NOT_FOUND for a
    /// model or version it does not serve.
    async fn model_ready(&self, request: Request<ModelReadyRequest>) -> Result<Response<ModelReadyResponse>, Status> {
        let request = request.into_inner();
        match api::find_model(&self.repository, &request.name, version(&request.version)) {
            Ok(_) => Ok(Response::new(ModelReadyResponse { ready: true })),
            Err(ServeError::ModelNotReady(_)) => Ok(Response::new(ModelReadyResponse { ready: false })),
            Err(e) => Err(status_of(&e)),
        }
    }

    async fn server_metadata(
        &self,
        _: Request<ServerMetadataRequest>,
    ) -> Result<Response<ServerMetadataResponse>, Status> {
        Ok(Response::new(ServerMetadataResponse {
            name: "tensorplug".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            extensions: vec!["model_repository".into(), "statistics".into()],
        }))
    }

    async fn model_metadata(
        &self,
        request: Request<ModelMetadataRequest>,
    ) -> Result<Response<ModelMetadataResponse>, Status> {
        let request = request.into_inner();
        let model =
            api::find_model(&self.repository, &request.name, version(&request.version)).map_err(|e| status_of(&e))?;
        Ok(Response::new(convert::metadata(&model)))
    }

    async fn model_infer(&self, request: Request<ModelInferRequest>) -> Result<Response<ModelInferResponse>, Status> {
        self.infer(request.into_inner()).await.map(Response::new)
    }

    type ModelStreamInferStream = InferStream;

    /// Requests on one stream are answered in order; a failed one answers its message in
    /// `error_message` and the stream goes on.
    async fn model_stream_infer(
        &self,
        request: Request<Streaming<ModelInferRequest>>,
    ) -> Result<Response<InferStream>, Status> {
        let mut incoming = request.into_inner();
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let service = Inference::new(self.repository.clone(), self.access.clone());
        tokio::spawn(async move {
            while let Some(message) = incoming.next().await {
                let answer = match message {
                    Ok(message) => match service.infer(message).await {
                        Ok(response) => Ok(ModelStreamInferResponse {
                            error_message: String::new(),
                            infer_response: Some(response),
                        }),
                        Err(status) => Ok(ModelStreamInferResponse {
                            error_message: status.message().to_owned(),
                            infer_response: None,
                        }),
                    },
                    Err(status) => Err(status),
                };
                let stop = answer.is_err();
                if tx.send(answer).await.is_err() || stop {
                    break;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn model_statistics(
        &self,
        request: Request<ModelStatisticsRequest>,
    ) -> Result<Response<ModelStatisticsResponse>, Status> {
        let request = request.into_inner();
        let models = if request.name.is_empty() {
            self.repository
                .index()
                .into_iter()
                .filter_map(|(_, entry)| match entry.status {
                    ModelStatus::Ready { model, .. } => Some(model),
                    _ => None,
                })
                .collect()
        } else {
            vec![
                api::find_model(&self.repository, &request.name, version(&request.version))
                    .map_err(|e| status_of(&e))?,
            ]
        };
        let count = |count| Some(StatisticDuration { count, ns: 0 });
        let model_stats = models
            .iter()
            .map(|model| {
                let stats = model.stats.snapshot();
                ModelStatistics {
                    name: model.config.name.clone(),
                    version: model.config.version.clone(),
                    last_inference: 0,
                    inference_count: stats.items,
                    execution_count: stats.batches,
                    inference_stats: Some(InferStatistics {
                        success: count(stats.items_ok),
                        fail: count(stats.items_failed),
                        ..InferStatistics::default()
                    }),
                    batch_stats: Vec::new(),
                }
            })
            .collect();
        Ok(Response::new(ModelStatisticsResponse { model_stats }))
    }

    async fn repository_index(
        &self,
        request: Request<RepositoryIndexRequest>,
    ) -> Result<Response<RepositoryIndexResponse>, Status> {
        self.access
            .check_read(bearer(request.metadata()))
            .map_err(|e| status_of(&e))?;
        let ready_only = request.into_inner().ready;
        let models = repository::index(&self.repository)
            .into_iter()
            .filter(|row| !ready_only || row.state == ModelState::Ready)
            .map(|row| ModelIndex {
                name: row.name,
                version: row.version.unwrap_or_default(),
                state: match row.state {
                    ModelState::Ready => "READY",
                    ModelState::Loading => "LOADING",
                    ModelState::Unavailable => "UNAVAILABLE",
                }
                .into(),
                reason: row.reason.unwrap_or_default(),
            })
            .collect();
        Ok(Response::new(RepositoryIndexResponse { models }))
    }

    async fn repository_model_load(
        &self,
        request: Request<RepositoryModelLoadRequest>,
    ) -> Result<Response<RepositoryModelLoadResponse>, Status> {
        self.change(request.metadata(), &request.get_ref().model_name, Change::Load)
            .await?;
        Ok(Response::new(RepositoryModelLoadResponse {}))
    }

    async fn repository_model_unload(
        &self,
        request: Request<RepositoryModelUnloadRequest>,
    ) -> Result<Response<RepositoryModelUnloadResponse>, Status> {
        self.change(request.metadata(), &request.get_ref().model_name, Change::Unload)
            .await?;
        Ok(Response::new(RepositoryModelUnloadResponse {}))
    }
}
