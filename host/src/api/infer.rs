//! One inference request, from decoded tensors to its answer: the model and version
//! looked up, the requested outputs and the timeout checked, the request split into
//! items, the items run through the model's batcher, and the outcomes assembled. Or
//! several requests at once, their items handed to the batcher together and each
//! request's outcomes assembled apart (the batch client's in-process lines).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::error::ServeError;
use crate::model::config::ModelConfig;
use crate::model::outcome::{ItemError, ItemOutcome};
use crate::model::request_parameters::{ParameterScalar, RequestParameter};
use crate::model::tensor::{Item, Tensor};
use crate::protocol::{clip, render_parameter, InferRequest, ParameterValue, Parameters};
use crate::serving::items::{assemble, split_request, Answer, RequestError};
use crate::serving::{Model, ModelStatus, Repository, RepositoryError, Standby};
use crate::traces::ItemsTrace;

/// A model as a request finds it: resident (its instances live), or on standby (its
/// first request loads it; its metadata is its `model.toml`'s meanwhile).
#[derive(Clone)]
pub enum Found {
    Resident(Arc<Model>),
    Standby(Arc<Standby>),
}

impl Found {
    pub fn config(&self) -> &ModelConfig {
        match self {
            Found::Resident(model) => &model.config,
            Found::Standby(standby) => &standby.config,
        }
    }

    /// What its plugins declared (on standby: when it was last resident).
    pub fn declared_metadata(&self) -> BTreeMap<String, String> {
        match self {
            Found::Resident(model) => model.shared.metadata(),
            Found::Standby(standby) => standby.metadata.clone(),
        }
    }
}

/// `name` as the repository serves it, checked against a requested version: resident or
/// on standby; a model loading for the first time is not ready, a failed one not found.
pub fn find(repository: &Repository, name: &str, version: Option<&str>) -> Result<Found, ServeError> {
    let found = match repository.status(name) {
        Some(ModelStatus::Ready { model, .. }) => Found::Resident(model),
        Some(ModelStatus::Standby(standby)) => Found::Standby(standby),
        // Known, and on its way: worth a retry, unlike a name nobody serves.
        Some(ModelStatus::Loading) => return Err(ServeError::ModelNotReady(clip(name).into_owned())),
        // Not indexed yet (on demand, at start): it may well be there in a moment.
        None if repository.is_indexing() => return Err(ServeError::ModelNotReady(clip(name).into_owned())),
        Some(ModelStatus::Failed { reason }) if repository.policy().on_demand() => {
            return Err(RepositoryError::Broken {
                name: clip(name).into_owned(),
                reason,
            }
            .into())
        }
        _ => return Err(ServeError::ModelNotFound(clip(name).into_owned())),
    };
    let live = &found.config().version;
    if let Some(version) = version {
        if version != live {
            return Err(ServeError::VersionNotFound {
                model: clip(name).into_owned(),
                version: clip(version).into_owned(),
                live: live.clone(),
            });
        }
    }
    Ok(found)
}

/// The resident version of `name`, checked against a requested version; a model on
/// standby has none (it has no statistics until a request loads it).
pub fn find_model(repository: &Repository, name: &str, version: Option<&str>) -> Result<Arc<Model>, ServeError> {
    match find(repository, name, version)? {
        Found::Resident(model) => Ok(model),
        Found::Standby(_) => Err(ServeError::NotResident(clip(name).into_owned())),
    }
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

/// How long `request` may take, from its `timeout` parameter or the model's default.
pub(super) fn request_timeout(config: &ModelConfig, request: &InferRequest) -> Result<Duration, ServeError> {
    Ok(request
        .timeout_us()?
        .map(Duration::from_micros)
        .unwrap_or(config.limits.request_timeout))
}

/// Runs `request` through `model`; `spent`: what the request's time limit already lost
/// waiting for its model to become resident; `trace`: the request's, when traced.
pub(super) async fn infer(
    model: &Model,
    request: InferRequest,
    spent: Duration,
    trace: Option<Arc<ItemsTrace>>,
) -> Result<Assembled, ServeError> {
    let (items, timeout) = prepare(&model.config, request)?;
    let timeout = timeout.saturating_sub(spent);
    let count = items.len();
    let outcomes = model.infer(items, timeout, trace).await?;
    assembled(&model.config, outcomes, count).await
}

/// Runs `requests` through `model` as one submission to its batcher (the shortest of
/// their timeouts for all), each answered apart: a request that does not fit the model
/// fails alone, a full queue fails them all.
pub(super) async fn infer_many(
    model: &Model,
    requests: Vec<InferRequest>,
    spent: Duration,
    trace: Option<Arc<ItemsTrace>>,
) -> Vec<Result<Assembled, ServeError>> {
    let config = &model.config;
    let mut counts: Vec<Result<usize, ServeError>> = Vec::with_capacity(requests.len());
    let mut items = Vec::new();
    let mut timeout: Option<Duration> = None;
    for request in requests {
        counts.push(prepare(config, request).map(|(mut own, own_timeout)| {
            timeout = Some(timeout.map_or(own_timeout, |t| t.min(own_timeout)));
            let count = own.len();
            items.append(&mut own);
            count
        }));
    }
    let Some(timeout) = timeout else {
        // None fits the model: every one is its own error already.
        return counts.into_iter().filter_map(Result::err).map(Err).collect();
    };
    let timeout = timeout.saturating_sub(spent);
    let mut outcomes = match model.infer(items, timeout, trace).await {
        Ok(outcomes) => outcomes.into_iter(),
        Err(error) => {
            return counts
                .into_iter()
                .map(|count| count.and(Err(error.clone().into())))
                .collect()
        }
    };
    let mut answers = Vec::with_capacity(counts.len());
    for count in counts {
        answers.push(match count {
            Ok(count) => assembled(config, outcomes.by_ref().take(count).collect(), count).await,
            Err(error) => Err(error),
        });
    }
    answers
}

/// A request checked against the model (its requested outputs) and split into items, with
/// its timeout.
fn prepare(config: &ModelConfig, request: InferRequest) -> Result<(Vec<Item>, Duration), ServeError> {
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
    let timeout = request_timeout(config, &request)?;
    let carried = carried_parameters(config, &request.parameters)?;
    let mut items = split_request(config, request.inputs)?;
    if !carried.is_empty() {
        for item in &mut items {
            item.extend(carried.iter().cloned());
        }
    }
    Ok((items, timeout))
}

/// The scalar tensors every item of a request carries for the model's
/// `[request_parameters]`: the request's value, else the declared default.
fn carried_parameters(config: &ModelConfig, given: &Parameters) -> Result<Vec<Tensor>, RequestError> {
    let mut tensors = Vec::with_capacity(config.request_parameters.len());
    for parameter in &config.request_parameters {
        let tensor = match given.get(&parameter.name) {
            None | Some(ParameterValue::Null) => parameter.default.as_ref().and_then(|d| parameter.tensor(d)),
            Some(value) => Some(
                scalar_of(value)
                    .and_then(|scalar| parameter.tensor(&scalar))
                    .ok_or_else(|| wrong(parameter, value))?,
            ),
        };
        tensors.extend(tensor);
    }
    Ok(tensors)
}

fn scalar_of(value: &ParameterValue) -> Option<ParameterScalar> {
    Some(match value {
        ParameterValue::Bool(b) => ParameterScalar::Bool(*b),
        ParameterValue::Number(n) => match n.as_i64() {
            Some(i) => ParameterScalar::Int(i),
            None => ParameterScalar::Float(n.as_f64()?),
        },
        ParameterValue::String(s) => ParameterScalar::Text(s.clone()),
        ParameterValue::Null | ParameterValue::Structured => return None,
    })
}

fn wrong(parameter: &RequestParameter, value: &ParameterValue) -> RequestError {
    RequestError::Mismatch(format!(
        "parameter \"{}\": expected {}, got {}",
        parameter.name,
        parameter.expected(),
        render_parameter(value)
    ))
}
/// Fails each item whose outputs hold more tensor data than the model's `max_answer_mib`,
/// dropping them before anything is encoded from them (as JSON text they would take up to
/// four times as much again).
fn refuse_large_answers(config: &ModelConfig, outcomes: &mut [ItemOutcome]) {
    let cap = config.limits.max_answer_bytes;
    for outcome in outcomes.iter_mut() {
        let Ok(outputs) = outcome else { continue };
        let bytes: usize = outputs.iter().map(|t| t.data.len()).sum();
        if bytes > cap {
            *outcome = Err(ItemError::new(
                500,
                format!(
                    "the item's outputs hold {:.1} MiB of tensor data, more than the model's \
                     limits.max_answer_mib ({} MiB)",
                    bytes as f64 / (1 << 20) as f64,
                    cap >> 20
                ),
            ));
        }
    }
}

/// The answer of a request of `items` items, from their outcomes.
async fn assembled(
    config: &ModelConfig,
    mut outcomes: Vec<ItemOutcome>,
    items: usize,
) -> Result<Assembled, ServeError> {
    refuse_large_answers(config, &mut outcomes);
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
        items,
        output_bytes,
    })
}
