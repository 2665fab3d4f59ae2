//! One inference request, from decoded tensors to its answer: the model and version
//! looked up, the requested outputs and the timeout checked, the request split into
//! items, the items run through the model's batcher, and the outcomes assembled.

use std::sync::Arc;
use std::time::Duration;

use super::error::ServeError;
use crate::protocol::{clip, InferRequest};
use crate::serving::items::{assemble, split_request, Answer, RequestError};
use crate::serving::{Model, ModelStatus, Repository};

/// The live version of `name`, checked against a requested version.
pub fn find_model(repository: &Repository, name: &str, version: Option<&str>) -> Result<Arc<Model>, ServeError> {
    let model = match repository.status(name) {
        Some(ModelStatus::Ready { model, .. }) => model,
        // Known, and on its way: worth a retry, unlike a name nobody serves.
        Some(ModelStatus::Loading) => return Err(ServeError::ModelNotReady(clip(name).into_owned())),
        _ => return Err(ServeError::ModelNotFound(clip(name).into_owned())),
    };
    if let Some(version) = version {
        if version != model.config.version {
            return Err(ServeError::VersionNotFound {
                model: clip(name).into_owned(),
                version: clip(version).into_owned(),
                live: model.config.version.clone(),
            });
        }
    }
    Ok(model)
}

/// A request's assembled answer.
pub(super) struct Assembled {
    pub answer: Answer,
    /// Items the request was split into.
    pub items: usize,
    /// Bytes of tensor data in the answer (its encoding costs about that much work).
    pub output_bytes: usize,
}

/// Answers whose outputs hold more bytes than this are stacked on the blocking pool.
const OFFLOAD_ASSEMBLY_BYTES: usize = 256 * 1024;

/// Runs `request` through `model`.
pub(super) async fn infer(model: &Model, request: InferRequest) -> Result<Assembled, ServeError> {
    let config = &model.config;
    if !config.outputs.is_empty() {
        if let Some(unknown) = request
            .outputs
            .iter()
            .find(|requested| !config.outputs.iter().any(|o| o.name == requested.name))
        {
            return Err(RequestError::UnknownOutput {
                name: unknown.name.clone(),
                model: config.name.clone(),
                outputs: config.outputs.iter().map(|o| o.name.clone()).collect(),
            }
            .into());
        }
    }
    let timeout = request
        .timeout_us()?
        .map(Duration::from_micros)
        .unwrap_or(config.limits.request_timeout);
    let items = split_request(config, request.inputs)?;
    let count = items.len();
    let outcomes = model.infer(items, timeout).await?;
    let output_bytes: usize = outcomes
        .iter()
        .filter_map(|o| o.as_ref().ok())
        .flat_map(|item| item.iter().map(|t| t.data.len()))
        .sum();
    let answer = if output_bytes > OFFLOAD_ASSEMBLY_BYTES {
        let config = config.clone();
        tokio::task::spawn_blocking(move || assemble(&config, outcomes))
            .await
            .map_err(|e| ServeError::Internal(format!("assembling the answer failed: {e}")))?
    } else {
        assemble(config, outcomes)
    };
    Ok(Assembled {
        answer,
        items: count,
        output_bytes,
    })
}
