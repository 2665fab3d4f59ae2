//! `inference.GRPCInferenceService`: each RPC asks [`crate::api`] what the matching REST
//! route asks it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use tokio_stream::Stream;
use tonic::metadata::MetadataMap;
use tonic::{Code, Request, Response, Status, Streaming};

use super::convert;
use super::metrics::GrpcMetrics;
use super::server::grpc_inference_service_server::GrpcInferenceService;
use super::status::{item_status, multi_status, status_of};
use super::trace;
use crate::api::repository::{self, Change, RepositoryAccess};
use crate::api::{self, InferCall};
use crate::protocol::grpc::proto::repository_index_response::ModelIndex;
use crate::protocol::grpc::proto::{
    InferStatistics, ModelInferRequest, ModelInferResponse, ModelMetadataRequest, ModelMetadataResponse,
    ModelReadyRequest, ModelReadyResponse, ModelStatistics, ModelStatisticsRequest, ModelStatisticsResponse,
    ModelStreamInferResponse, RepositoryIndexRequest, RepositoryIndexResponse, RepositoryModelLoadRequest,
    RepositoryModelLoadResponse, RepositoryModelUnloadRequest, RepositoryModelUnloadResponse, ServerLiveRequest,
    ServerLiveResponse, ServerMetadataRequest, ServerMetadataResponse, ServerReadyRequest, ServerReadyResponse,
    StatisticDuration,
};
use crate::serving::items::Answer;
use crate::serving::{ModelState, ModelStatus, Repository};
use crate::traces::{Incoming, RequestTrace};

/// The service, over the server's repository.
#[derive(Clone)]
pub struct Inference {
    repository: Arc<Repository>,
    access: RepositoryAccess,
    /// Call counters; None with `--metrics off`.
    metrics: Option<GrpcMetrics>,
}

impl Inference {
    pub fn new(repository: Arc<Repository>, access: RepositoryAccess, metrics: Option<GrpcMetrics>) -> Self {
        Self {
            repository,
            access,
            metrics,
        }
    }

    /// Counts a call of `method` by its outcome, and wraps its answer.
    fn counted<T>(&self, method: &'static str, result: Result<T, Status>) -> Result<Response<T>, Status> {
        if let Some(metrics) = &self.metrics {
            metrics.count(method, result.as_ref().map_or_else(Status::code, |_| Code::Ok));
        }
        result.map(Response::new)
    }

    /// Loads or unloads a model under the REST edge's rules, the token from `metadata`.
    async fn change(&self, metadata: &tonic::metadata::MetadataMap, name: &str, change: Change) -> Result<(), Status> {
        repository::change(&self.repository, &self.access, bearer(metadata), name, change)
            .await
            .map_err(|e| status_of(&e))
    }

    /// One inference call, from message to message, in `trace`.
    async fn infer(&self, message: ModelInferRequest, trace: RequestTrace) -> Result<ModelInferResponse, Status> {
        let version = version(&message.model_version);
        let call = InferCall::start(
            &self.repository,
            &super::status::GRPC_EDGE,
            &message.model_name,
            version,
            trace,
        )
        .map_err(|e| status_of(&e))?;
        let (status, answer) = answer(&call, message).await;
        call.answered(status);
        answer
    }
}

/// The answer to `message`, and the protocol-neutral status it stands for.
async fn answer(call: &InferCall, message: ModelInferRequest) -> (u16, Result<ModelInferResponse, Status>) {
    let request = match convert::request(message) {
        Ok(request) => request,
        Err(error) => {
            call.failed(error.status(), &error);
            return (error.status(), Err(status_of(&error)));
        }
    };
    match call.run(request).await {
        Err(error) => (error.status(), Err(status_of(&error))),
        Ok(inferred) => match inferred.answer {
            Answer::Success(outputs) => (200, Ok(convert::response(&inferred.model, inferred.id, outputs))),
            Answer::Failure(error) => (error.status, Err(item_status(&error))),
            Answer::MultiStatus(outcomes) => (super::status::worst_status(&outcomes), Err(multi_status(&outcomes))),
        },
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

type InferStream = Pin<Box<dyn Stream<Item = Result<ModelStreamInferResponse, Status>> + Send>>;

type Answering = Pin<Box<dyn Future<Output = ModelStreamInferResponse> + Send>>;

/// The answers of one `ModelStreamInfer`, made on demand: the next request is read and run
/// only when the stream is polled for the next answer. tonic polls it when the body asks
/// for more, which (through [`super::paced`]) happens once h2 has room, i.e. once the
/// client reads; so a client that stops reading stops being served, and the server holds
/// at most the one answer it has not taken (no channel of answers piling up). A
/// malformed message ends the stream with its status.
struct Answers {
    incoming: Option<Streaming<ModelInferRequest>>,
    running: Option<Answering>,
    service: Inference,
    /// The trace context of the stream's metadata: each message's span is a child of it.
    context: Incoming,
}

impl Answers {
    async fn answer(service: Inference, message: ModelInferRequest, context: Incoming) -> ModelStreamInferResponse {
        let trace = trace::start(context, "ModelStreamInfer");
        match service.counted("ModelStreamInfer", service.infer(message, trace).await) {
            Ok(response) => ModelStreamInferResponse {
                error_message: String::new(),
                infer_response: Some(response.into_inner()),
            },
            Err(status) => ModelStreamInferResponse {
                error_message: status.message().to_owned(),
                infer_response: None,
            },
        }
    }
}

impl Stream for Answers {
    type Item = Result<ModelStreamInferResponse, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            if let Some(running) = &mut self.running {
                let answer = ready!(running.as_mut().poll(cx));
                self.running = None;
                return Poll::Ready(Some(Ok(answer)));
            }
            let Some(incoming) = &mut self.incoming else {
                return Poll::Ready(None);
            };
            match ready!(Pin::new(incoming).poll_next(cx)) {
                Some(Ok(message)) => {
                    let service = self.service.clone();
                    let context = self.context.clone();
                    self.running = Some(Box::pin(Self::answer(service, message, context)));
                }
                Some(Err(status)) => {
                    self.incoming = None;
                    return Poll::Ready(Some(Err(status)));
                }
                None => {
                    self.incoming = None;
                    return Poll::Ready(None);
                }
            }
        }
    }
}

#[tonic::async_trait]
impl GrpcInferenceService for Inference {
    async fn server_live(&self, _: Request<ServerLiveRequest>) -> Result<Response<ServerLiveResponse>, Status> {
        self.counted("ServerLive", Ok(ServerLiveResponse { live: true }))
    }

    async fn server_ready(&self, _: Request<ServerReadyRequest>) -> Result<Response<ServerReadyResponse>, Status> {
        let ready = self.repository.all_ready();
        self.counted("ServerReady", Ok(ServerReadyResponse { ready }))
    }

    /// Ready or not for a model the server knows (loading, or the server draining: not
    /// ready); NOT_FOUND for a model or version it does not serve.
    async fn model_ready(&self, request: Request<ModelReadyRequest>) -> Result<Response<ModelReadyResponse>, Status> {
        let request = request.into_inner();
        let result = api::model_ready(&self.repository, &request.name, version(&request.version))
            .map(|ready| ModelReadyResponse { ready })
            .map_err(|e| status_of(&e));
        self.counted("ModelReady", result)
    }

    async fn server_metadata(
        &self,
        _: Request<ServerMetadataRequest>,
    ) -> Result<Response<ServerMetadataResponse>, Status> {
        let metadata = ServerMetadataResponse {
            name: "tensorplug".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            extensions: vec!["model_repository".into(), "statistics".into()],
        };
        self.counted("ServerMetadata", Ok(metadata))
    }

    async fn model_metadata(
        &self,
        request: Request<ModelMetadataRequest>,
    ) -> Result<Response<ModelMetadataResponse>, Status> {
        let request = request.into_inner();
        let result = api::find(&self.repository, &request.name, version(&request.version))
            .map(|model| convert::metadata(&model))
            .map_err(|e| status_of(&e));
        self.counted("ModelMetadata", result)
    }

    async fn model_infer(&self, request: Request<ModelInferRequest>) -> Result<Response<ModelInferResponse>, Status> {
        let trace = trace::start(trace::incoming(request.metadata()), "ModelInfer");
        let traceparent = trace.traceparent();
        let result = self.infer(request.into_inner(), trace).await;
        let mut answer = self.counted("ModelInfer", result);
        trace::carry(&mut answer, traceparent);
        answer
    }

    type ModelStreamInferStream = InferStream;

    /// Requests on one stream are answered in order; a failed one answers its message in
    /// `error_message` and the stream goes on. A request is read and run only when the
    /// answer stream is asked for its next answer, i.e. once the client has taken the
    /// previous one (see [`Answers`]).
    async fn model_stream_infer(
        &self,
        request: Request<Streaming<ModelInferRequest>>,
    ) -> Result<Response<InferStream>, Status> {
        let context = trace::incoming(request.metadata());
        Ok(Response::new(Box::pin(Answers {
            incoming: Some(request.into_inner()),
            running: None,
            service: self.clone(),
            context,
        })))
    }

    async fn model_statistics(
        &self,
        request: Request<ModelStatisticsRequest>,
    ) -> Result<Response<ModelStatisticsResponse>, Status> {
        let request = request.into_inner();
        let result = self.statistics(&request);
        self.counted("ModelStatistics", result)
    }

    async fn repository_index(
        &self,
        request: Request<RepositoryIndexRequest>,
    ) -> Result<Response<RepositoryIndexResponse>, Status> {
        let token = bearer(request.metadata()).map(str::to_owned);
        let result = self.index(token.as_deref(), request.into_inner().ready);
        self.counted("RepositoryIndex", result)
    }

    async fn repository_model_load(
        &self,
        request: Request<RepositoryModelLoadRequest>,
    ) -> Result<Response<RepositoryModelLoadResponse>, Status> {
        let result = self
            .change(request.metadata(), &request.get_ref().model_name, Change::Load)
            .await
            .map(|()| RepositoryModelLoadResponse {});
        self.counted("RepositoryModelLoad", result)
    }

    async fn repository_model_unload(
        &self,
        request: Request<RepositoryModelUnloadRequest>,
    ) -> Result<Response<RepositoryModelUnloadResponse>, Status> {
        let result = self
            .change(request.metadata(), &request.get_ref().model_name, Change::Unload)
            .await
            .map(|()| RepositoryModelUnloadResponse {});
        self.counted("RepositoryModelUnload", result)
    }
}

impl Inference {
    fn statistics(&self, request: &ModelStatisticsRequest) -> Result<ModelStatisticsResponse, Status> {
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
        let duration = |count, ns| Some(StatisticDuration { count, ns });
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
                        success: duration(stats.requests_ok, stats.requests_ok_ns),
                        fail: duration(stats.requests_failed, stats.requests_failed_ns),
                        queue: duration(stats.queue_items, stats.queue_ns),
                        compute_infer: duration(stats.batches, stats.compute_ns),
                        ..InferStatistics::default()
                    }),
                    batch_stats: Vec::new(),
                }
            })
            .collect();
        Ok(ModelStatisticsResponse { model_stats })
    }

    fn index(&self, token: Option<&str>, ready_only: bool) -> Result<RepositoryIndexResponse, Status> {
        self.access.check_read(token).map_err(|e| status_of(&e))?;
        let models = repository::index(&self.repository)
            .into_iter()
            .filter(|row| !ready_only || matches!(row.state, ModelState::Ready | ModelState::Standby))
            .map(|row| ModelIndex {
                name: row.name,
                version: row.version.unwrap_or_default(),
                state: match row.state {
                    ModelState::Ready => "READY",
                    ModelState::Loading => "LOADING",
                    ModelState::Standby => "STANDBY",
                    ModelState::Unavailable => "UNAVAILABLE",
                }
                .into(),
                reason: row.reason.unwrap_or_default(),
            })
            .collect();
        Ok(RepositoryIndexResponse { models })
    }
}
