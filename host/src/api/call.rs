//! [`InferCall`]: the one inference path every edge takes. An edge decodes its wire
//! format into an [`InferRequest`], starts a call (the model looked up), runs it, encodes
//! what comes back and says what it answered; the call applies the output options, logs
//! the outcome inside the request's debug span, and counts the answer in the model's
//! statistics under the edge's label.
//!
//! A model found on standby (on-demand residency) is made resident when the call runs,
//! within the request's own time limit: every edge's first request of a model takes the
//! same path to its load.

use std::fmt::Display;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use tracing::{Instrument, Span};

use super::error::ServeError;
use super::infer::{find, infer, infer_many, request_timeout, Assembled, Found};
use crate::model::config::ModelConfig;
use crate::protocol::{clip, InferRequest, OutputOptions};
use crate::serving::items::Answer;
use crate::serving::residency::LoadTimes;
use crate::serving::{EdgeLabel, Model, Repository};
use crate::traces::{ItemsTrace, RequestTrace};

/// One inference request on its way through the server, from its model's lookup to its
/// counted answer.
pub struct InferCall {
    repository: Arc<Repository>,
    found: Found,
    /// The version asked for, checked again against the version a load brings.
    version: Option<String>,
    /// The resident model, once the call has one: at its start, or after the load it
    /// waited for (whose times are then in `cold`).
    model: OnceLock<Arc<Model>>,
    cold: OnceLock<LoadTimes>,
    edge: &'static EdgeLabel,
    arrived: Instant,
    span: Span,
    /// The request's server span (OpenTelemetry), when tracing is on.
    trace: RequestTrace,
}

/// What a call answered.
pub struct Inferred {
    /// The model version that answered.
    pub model: Arc<Model>,
    /// The outcome, every item's outputs already cut to the requested ones, in requested
    /// order.
    pub answer: Answer,
    /// The request's id, to echo.
    pub id: Option<String>,
    /// The request's output choices (binary or JSON, per output).
    pub options: OutputOptions,
    /// Bytes of tensor data in the answer (its encoding costs about that much work).
    pub output_bytes: usize,
}

impl Inferred {
    /// The protocol-neutral status of the answer: 200 when every item succeeded, a single
    /// failed item's own, 207 (multi-status) when some of several items failed.
    pub fn status(&self) -> u16 {
        match &self.answer {
            Answer::Success(_) => 200,
            Answer::Failure(error) => error.status,
            Answer::MultiStatus(_) => 207,
        }
    }
}

impl InferCall {
    /// Starts a call of `name` (at `version`, if given) that came in through `edge`. A model
    /// not served is logged as a failed request and not counted (there is no model to
    /// count it in).
    /// `trace`: the request's server span, begun by the edge (which read its context).
    pub fn start(
        repository: &Arc<Repository>,
        edge: &'static EdgeLabel,
        name: &str,
        version: Option<&str>,
        trace: RequestTrace,
    ) -> Result<InferCall, ServeError> {
        let arrived = Instant::now();
        // A span per request costs even when nothing is printed, so it is a debug span; the
        // lines logged at the default level carry the model (and id) themselves.
        let span = tracing::debug_span!(
            "infer",
            edge = edge.name,
            model = %clip(name),
            id = tracing::field::Empty,
            items = tracing::field::Empty
        );
        match find(repository, name, version) {
            Ok(found) => {
                let model = OnceLock::new();
                if let Found::Resident(resident) = &found {
                    resident.last_used.touch();
                    let _ = model.set(resident.clone());
                }
                Ok(InferCall {
                    repository: repository.clone(),
                    found,
                    version: version.map(str::to_owned),
                    model,
                    cold: OnceLock::new(),
                    edge,
                    arrived,
                    span,
                    trace,
                })
            }
            Err(error) => {
                span.in_scope(|| log_failed(name, error.status(), &error, &trace));
                trace.finish(error.status());
                Err(error)
            }
        }
    }

    /// The configuration of the model the call runs on (resident or on standby).
    pub fn config(&self) -> &ModelConfig {
        match self.model.get() {
            Some(model) => &model.config,
            None => self.found.config(),
        }
    }

    /// The request's span, for the edge's own steps (decoding) to run in.
    pub fn span(&self) -> &Span {
        &self.span
    }

    /// Logs a failure of the whole request outside [`InferCall::run`] (an unreadable
    /// message, a body too large, an answer that could not be encoded), with the
    /// protocol-neutral `status` it is answered with.
    pub fn failed(&self, status: u16, error: &dyn Display) {
        self.span
            .in_scope(|| log_failed(&self.config().name, status, error, &self.trace));
    }

    /// Runs `request`: the answer with the requested outputs only, a failed item or every
    /// item's outcome logged. A failure of the whole request is logged too.
    pub async fn run(&self, request: InferRequest) -> Result<Inferred, ServeError> {
        let result = self.run_logged(request).instrument(self.span.clone()).await;
        if let Err(error) = &result {
            self.failed(error.status(), error);
        }
        result
    }

    async fn run_logged(&self, request: InferRequest) -> Result<Inferred, ServeError> {
        if let Some(id) = &request.id {
            self.span.record("id", &*clip(id));
        }
        let options = OutputOptions::from_request(&request);
        let id = request.id.clone();
        let (model, spent) = self.resident(|config| request_timeout(config, &request)).await?;
        let assembled = infer(&model, request, spent, self.items_trace(&model)).await?;
        self.span.record("items", assembled.items);
        Ok(self.inferred(model, id, options, assembled))
    }

    /// The call's resident model, made resident first if it was found on standby (within
    /// the `timeout` its configuration gives, from the call's arrival: only read then),
    /// with the time that took.
    async fn resident(
        &self,
        timeout: impl FnOnce(&ModelConfig) -> Result<Duration, ServeError>,
    ) -> Result<(Arc<Model>, Duration), ServeError> {
        if let Some(model) = self.model.get() {
            return Ok((model.clone(), Duration::ZERO));
        }
        let config = self.found.config();
        let name = &config.name;
        let deadline = tokio::time::Instant::from_std(self.arrived) + timeout(config)?;
        let (model, load) = self.repository.resident(name, deadline).await?;
        if let Some(version) = &self.version {
            // The folder changed while the model was on standby.
            if *version != model.config.version {
                return Err(ServeError::VersionNotFound {
                    model: clip(name).into_owned(),
                    version: clip(version).into_owned(),
                    live: model.config.version.clone(),
                });
            }
        }
        match load {
            Some(_) => model.last_used.touch_by_its_load(),
            None => model.last_used.touch(),
        }
        let model = self.model.get_or_init(|| model).clone();
        if let Some(load) = load {
            let _ = self.cold.set(load);
            self.trace
                .waited_for_load(name, self.arrived, load.started, load.finished);
        }
        Ok((model, self.arrived.elapsed()))
    }

    /// Runs several requests at once, their items handed to the model's batcher together
    /// (as one request's would be) and each answered apart, as [`InferCall::run`] answers
    /// one: a client with requests ready in this process (the batch client's lines) has
    /// them batched without merging them into one request and splitting its answer again.
    pub async fn run_many(&self, requests: Vec<InferRequest>) -> Vec<Result<Inferred, ServeError>> {
        let asked: Vec<(Option<String>, OutputOptions)> = requests
            .iter()
            .map(|request| (request.id.clone(), OutputOptions::from_request(request)))
            .collect();
        let shortest = |config: &ModelConfig| {
            Ok(requests
                .iter()
                .filter_map(|request| request_timeout(config, request).ok())
                .min()
                .unwrap_or(config.limits.request_timeout))
        };
        let (model, spent) = match self.resident(shortest).instrument(self.span.clone()).await {
            Ok(resident) => resident,
            Err(error) => {
                self.failed(error.status(), &error);
                return asked.iter().map(|_| Err(error.duplicate())).collect();
            }
        };
        let results = infer_many(&model, requests, spent, self.items_trace(&model))
            .instrument(self.span.clone())
            .await;
        let items: usize = results.iter().flatten().map(|assembled| assembled.items).sum();
        self.span.record("items", items);
        asked
            .into_iter()
            .zip(results)
            .map(|((id, options), result)| match result {
                Ok(assembled) => Ok(self
                    .span
                    .in_scope(|| self.inferred(model.clone(), id, options, assembled))),
                Err(error) => {
                    self.failed(error.status(), &error);
                    Err(error)
                }
            })
            .collect()
    }

    /// What the request's items carry into `model`'s batcher of its trace.
    fn items_trace(&self, model: &Model) -> Option<Arc<ItemsTrace>> {
        self.trace.for_items(&model.config.name, &model.config.version)
    }

    /// A request's answer with the requested outputs only, a failed item or every item's
    /// outcome logged (and recorded in its trace).
    fn inferred(
        &self,
        model: Arc<Model>,
        id: Option<String>,
        options: OutputOptions,
        assembled: Assembled,
    ) -> Inferred {
        let name = model.config.name.as_str();
        let answer = match assembled.answer {
            Answer::Success(outputs) => Answer::Success(options.filter(outputs)),
            Answer::Failure(error) => {
                let trace = self.trace.ids();
                tracing::info!(
                    model = name,
                    id = id.as_deref().map(clip).as_deref(),
                    status = error.status,
                    trace_id = trace.as_ref().map(|(t, _)| t.as_str()),
                    span_id = trace.as_ref().map(|(_, s)| s.as_str()),
                    "item failed: {}",
                    error.message
                );
                self.trace.item_failed(0, error.status, &error.message);
                Answer::Failure(error)
            }
            Answer::MultiStatus(outcomes) => {
                let trace = self.trace.ids();
                let failed = outcomes.iter().filter(|o| o.is_err()).count();
                tracing::info!(
                    model = name,
                    id = id.as_deref().map(clip).as_deref(),
                    failed,
                    items = outcomes.len(),
                    trace_id = trace.as_ref().map(|(t, _)| t.as_str()),
                    span_id = trace.as_ref().map(|(_, s)| s.as_str()),
                    "multi-status answer"
                );
                for (index, outcome) in outcomes.iter().enumerate() {
                    if let Err(error) = outcome {
                        self.trace.item_failed(index, error.status, &error.message);
                    }
                }
                Answer::MultiStatus(
                    outcomes
                        .into_iter()
                        .map(|o| o.map(|item| options.filter(item)))
                        .collect(),
                )
            }
        };
        Inferred {
            model,
            answer,
            id,
            options,
            output_bytes: assembled.output_bytes,
        }
    }

    /// Counts the call in its model's statistics: answered with the protocol-neutral
    /// `status` (an HTTP status number), now.
    pub fn answered(self, status: u16) {
        self.answered_each([status]);
    }

    /// Counts the requests of a [`InferCall::run_many`], one answered status each (the
    /// call's trace ends with the highest).
    pub fn answered_each(mut self, statuses: impl IntoIterator<Item = u16>) {
        let elapsed = self.arrived.elapsed();
        if let Some(load) = self.cold.get() {
            self.repository.residency.cold_start(self.arrived, *load);
        }
        let model = self.model.get();
        // Only the exemplars' histogram reads it: no id is formatted per request otherwise.
        let trace_id = crate::traces::exemplars().then(|| self.trace_id()).flatten();
        let mut highest = 0;
        for status in statuses {
            highest = highest.max(status);
            // A call whose model never became resident has no statistics to count it in.
            if let Some(model) = model {
                model
                    .stats
                    .record_request(self.edge, status, elapsed, trace_id.as_deref());
            }
        }
        self.trace.take().finish(highest);
    }

    /// The request's trace id, for its log lines, when it is traced.
    fn trace_id(&self) -> Option<String> {
        self.trace.ids().map(|(trace, _)| trace)
    }
}

impl Drop for InferCall {
    fn drop(&mut self) {
        // The model first, so that a load waiting for room finds it free.
        if self.model.take().is_some() {
            self.repository.request_ended();
        }
    }
}

/// The one "request failed" line (failed items are logged where they are answered).
fn log_failed(model: &str, status: u16, error: &dyn Display, trace: &RequestTrace) {
    let ids = trace.ids();
    tracing::info!(
        model = %clip(model),
        status,
        trace_id = ids.as_ref().map(|(t, _)| t.as_str()),
        span_id = ids.as_ref().map(|(_, s)| s.as_str()),
        "request failed: {error}"
    );
}
