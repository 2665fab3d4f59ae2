//! In-process: the model loaded from a repository folder into this process, and requests
//! handed to the same [`crate::api::infer`] the server's edges call — the same repository,
//! batcher, instance threads and pipeline as `serve`, with no socket and no encoding in
//! between. Only the requested model is loaded.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::{Failure, ModelInfo, Reply, SetupError};
use crate::api::{self, ServeError};
use crate::batch::Options;
use crate::protocol::{InferRequest, OutputOptions};
use crate::runtime::Runtime;
use crate::serving::items::Answer;
use crate::serving::{Repository, RepositoryError};

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
        repository.load(&options.model).await.map_err(|e| match e {
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

    pub(crate) async fn infer(&self, request: InferRequest) -> Result<Reply, Failure> {
        // Looked up per request (a lock-free read), so that closing can wait for the
        // last request to let go of the model.
        let model = api::find_model(&self.repository, &self.model, self.version.as_deref()).map_err(|e| refused(&e))?;
        let options = OutputOptions::from_request(&request);
        let inference = match tokio::time::timeout(self.timeout, api::infer(&model, request)).await {
            Err(_) => return Err(Failure::timed_out(self.timeout)),
            Ok(result) => result.map_err(|e| refused(&e))?,
        };
        let (model_name, model_version) = (model.config.name.clone(), model.config.version.clone());
        match inference.answer {
            Answer::Success(outputs) => Ok(Reply::Success {
                model_name,
                model_version,
                outputs: options.filter(outputs),
            }),
            Answer::Failure(error) => Err(Failure::answered(error.status, error.message, None)),
            Answer::MultiStatus(outcomes) => Ok(Reply::Items {
                model_name,
                model_version,
                results: outcomes
                    .into_iter()
                    .map(|outcome| outcome.map(|item| options.filter(item)))
                    .collect(),
            }),
        }
    }

    /// Stops the model: its queue empties and its instance threads exit.
    pub(crate) async fn close(&self) {
        let deadline = tokio::time::Instant::now() + CLOSE_GRACE;
        if !self.repository.drain(deadline).await {
            tracing::warn!("the model's instances did not stop within {} s", CLOSE_GRACE.as_secs());
        }
    }
}

/// A request refused before any item ran, with the HTTP status the REST edge answers it
/// with (and its `Retry-After` of 1 s for an overloaded or loading model).
fn refused(error: &ServeError) -> Failure {
    let status = match error {
        ServeError::Protocol(_) | ServeError::InvalidInput(_) | ServeError::Unreadable(_) => 400,
        ServeError::Unauthorized => 401,
        ServeError::Forbidden(_) => 403,
        ServeError::ModelNotFound(_) | ServeError::VersionNotFound { .. } => 404,
        ServeError::BodyTooLarge { .. } => 413,
        ServeError::UnsupportedMediaType(_) => 415,
        ServeError::ModelNotReady(_) | ServeError::Queue(_) => 503,
        ServeError::Internal(_) => 500,
        ServeError::Repository(e) => match e {
            RepositoryError::InvalidName(_) => 400,
            RepositoryError::NoSuchFolder(_) | RepositoryError::NotLoaded(_) => 404,
            RepositoryError::Load { .. } => 500,
        },
    };
    let retry_after = (status == 503).then_some(Duration::from_secs(1));
    Failure::answered(status, error.to_string(), retry_after)
}
