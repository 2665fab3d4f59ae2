//! In-process: the model loaded from a repository folder into this process, and requests
//! handed to the same [`crate::api::InferCall`] the server's edges make — the same repository,
//! batcher, instance threads and pipeline as `serve`, with no socket and no encoding in
//! between. Only the requested model is loaded.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::{Failure, ModelInfo, Reply, SetupError};
use crate::api::{self, InferCall, Inferred, ServeError};
use crate::batch::options::Options;
use crate::protocol::InferRequest;
use crate::runtime::Runtime;
use crate::serving::items::Answer;
use crate::serving::{EdgeLabel, Repository, RepositoryError};
use crate::traces::{ClientTrace, EdgeSpan, RequestTrace};

/// Requests run in this process, counted by their protocol-neutral status.
static IN_PROCESS: EdgeLabel = EdgeLabel {
    name: "in-process",
    status_name: None,
};

/// How long closing waits for the model's instance threads to finish.
const CLOSE_GRACE: Duration = Duration::from_secs(10);

pub(crate) struct Local {
    pub info: ModelInfo,
    repository: Arc<Repository>,
    model: String,
    version: Option<String>,
    timeout: Duration,
}

impl Local {
    /// Loads `options.model` from `repository` and waits until it is ready.
    pub(crate) async fn load(
        repository: &Path,
        cache_dir: Option<&Path>,
        options: &Options,
    ) -> Result<Local, SetupError> {
        let failed = |reason: String| SetupError::Load {
            model: options.model.clone(),
            repository: repository.display().to_string(),
            reason,
        };
        let runtime = Runtime::new(cache_dir).map_err(|e| failed(format!("the wasm runtime did not start: {e}")))?;
        let repository = Arc::new(Repository::new(repository, runtime, false));
        repository.keep_residency();
        repository
            .load(&options.model, crate::serving::residency::STARTUP)
            .await
            .map_err(|e| match e {
                RepositoryError::Load { source, .. } => failed(format!("it failed to load: {source}")),
                other => failed(other.to_string()),
            })?;
        let model = api::find_model(&repository, &options.model, options.model_version.as_deref())
            .map_err(|e| failed(e.to_string()))?;
        let info = ModelInfo {
            name: model.config.name.clone(),
            version: model.config.version.clone(),
            batches: model.config.batches,
        };
        Ok(Local {
            info,
            repository,
            model: options.model.clone(),
            version: options.model_version.clone(),
            timeout: options.timeout,
        })
    }

    pub(crate) async fn infer(&self, request: InferRequest, trace: &ClientTrace) -> Result<Reply, Failure> {
        // Looked up per request (a lock-free read), so that closing can wait for the
        // last request to let go of the model.
        let call = InferCall::start(
            &self.repository,
            &IN_PROCESS,
            &self.model,
            self.version.as_deref(),
            server_span(trace),
        )
        .map_err(|e| refused(&e))?;
        let inferred = match tokio::time::timeout(self.timeout, call.run(request)).await {
            Err(_) => return Err(Failure::timed_out(self.timeout)),
            Ok(Err(error)) => {
                call.answered(error.status());
                return Err(refused(&error));
            }
            Ok(Ok(inferred)) => inferred,
        };
        let status = inferred.status();
        let reply = reply(inferred);
        call.answered(status);
        reply
    }

    /// Runs `requests` at once, their items stacked by the model's batcher as one
    /// request's are; each gets its own reply.
    pub(crate) async fn infer_many(
        &self,
        requests: Vec<InferRequest>,
        trace: &ClientTrace,
    ) -> Vec<Result<Reply, Failure>> {
        let count = requests.len();
        let call = match InferCall::start(
            &self.repository,
            &IN_PROCESS,
            &self.model,
            self.version.as_deref(),
            server_span(trace),
        ) {
            Ok(call) => call,
            Err(error) => return vec![Err(refused(&error)); count],
        };
        let Ok(results) = tokio::time::timeout(self.timeout, call.run_many(requests)).await else {
            return vec![Err(Failure::timed_out(self.timeout)); count];
        };
        let statuses: Vec<u16> = results
            .iter()
            .map(|result| result.as_ref().map_or_else(ServeError::status, Inferred::status))
            .collect();
        let replies = results
            .into_iter()
            .map(|result| match result {
                Ok(inferred) => reply(inferred),
                Err(error) => Err(refused(&error)),
            })
            .collect();
        call.answered_each(statuses);
        replies
    }

    /// Stops the model: its queue empties and its instance threads exit.
    pub(crate) async fn close(&self) {
        let deadline = tokio::time::Instant::now() + CLOSE_GRACE;
        if !self.repository.drain(deadline).await {
            tracing::warn!("the model's instances did not stop within {} s", CLOSE_GRACE.as_secs());
        }
    }
}

/// What the batch client reads of an answer.
fn reply(inferred: Inferred) -> Result<Reply, Failure> {
    let config = &inferred.model.config;
    let (model_name, model_version) = (config.name.clone(), config.version.clone());
    match inferred.answer {
        Answer::Success(outputs) => Ok(Reply::Success {
            model_name,
            model_version,
            outputs,
        }),
        Answer::Failure(error) => Err(Failure::answered(error.status, error.message, None)),
        Answer::MultiStatus(results) => Ok(Reply::Items {
            model_name,
            model_version,
            results,
        }),
    }
}

/// A request refused before any item ran, with its status (the one the REST edge answers)
/// and how long to wait before retrying it.
fn refused(error: &ServeError) -> Failure {
    Failure::answered(error.status(), error.to_string(), error.retry_after())
}

/// The in-process request's server span, the client span's child (both in this process,
/// so the tree reads as it does against a server).
fn server_span(trace: &ClientTrace) -> RequestTrace {
    let edge = || EdgeSpan {
        name: "tensorplug.infer.in_process".into(),
        kind: opentelemetry::trace::SpanKind::Server,
        status: |status| opentelemetry::KeyValue::new("tensorplug.status", i64::from(status)),
    };
    RequestTrace::start(trace.incoming(), edge, Vec::new)
}
