//! One delivered request message, from its subject and headers to its answer and what is
//! then done with it (acknowledged, terminated, handed back).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, AckKind};
use async_nats::HeaderMap;
use tracing::Instrument;

use super::metrics::{NatsMetrics, Outcome};
use super::publish::{publish, retry_budget, AnswerHeaders};
use super::settings::NatsSettings;
use super::status::{disposition, Disposition, NATS_EDGE};
use crate::api::{decode_body, EncodedAnswer, InferCall, ServeError};
use crate::protocol::nats::{self as subject, headers};
use crate::protocol::{clip, InferRequest};
use crate::serving::Repository;
use crate::traces::{EdgeSpan, Incoming, RequestTrace};
use opentelemetry::trace::SpanKind;
use opentelemetry::KeyValue;

/// What every message handler shares.
pub(super) struct Shared {
    pub client: async_nats::Client,
    pub context: jetstream::Context,
    pub settings: NatsSettings,
    pub repository: Arc<Repository>,
    pub max_body_bytes: usize,
    pub metrics: Option<NatsMetrics>,
}

impl Shared {
    pub fn count(&self, outcome: Outcome) {
        if let Some(metrics) = &self.metrics {
            metrics.count(outcome);
        }
    }
}

/// Where a request's answer goes and what it is called, read from the message before
/// anything else (a message that cannot be read at all still gets an answer there).
pub(super) struct Envelope {
    /// The model as the subject names it (served or not), and the version asked for.
    pub model: String,
    pub version: Option<String>,
    /// The request's id until its body gives one: its `Nats-Msg-Id`, else
    /// `<stream>-<sequence>` (the same on every delivery).
    pub request_id: String,
    pub sequence: u64,
    /// The subject the answer goes to.
    pub answer_to: String,
    /// Why the request named an answer subject that cannot be published to.
    pub bad_reply_to: Option<String>,
    /// The server span's `traceparent`, for the answer's headers (tracing on).
    pub traceparent: Option<String>,
}

impl Envelope {
    pub fn read(shared: &Shared, subject: &str, headers: &HeaderMap, sequence: u64) -> Envelope {
        let settings = &shared.settings;
        let target = subject::target(&settings.subject_prefix, subject, |name| {
            shared.repository.status(name).is_some()
        });
        // The consumer's filter lets no other subject through; named as it is if one did.
        let (model, version) = match target {
            Some(target) => (target.model, target.version),
            None => (subject.to_owned(), None),
        };
        let request_id = headers
            .get(headers::MSG_ID)
            .map(|id| clip_id(id.as_str()))
            .filter(|id| !id.is_empty())
            .unwrap_or_else(|| format!("{}-{sequence}", settings.stream));
        let default_to = subject::answer_subject(&settings.answer_prefix, &model);
        let (answer_to, bad_reply_to) = match headers.get(headers::REPLY_TO) {
            None => (default_to, None),
            Some(given) => match subject::answerable(given.as_str(), &settings.subject_prefix) {
                Ok(to) => (to.to_owned(), None),
                Err(why) => (default_to, Some(why)),
            },
        };
        Envelope {
            model,
            version,
            request_id,
            sequence,
            answer_to,
            bad_reply_to,
            traceparent: None,
        }
    }

    /// Publishes `answer`, retrying while the broker is away (for most of the ack wait).
    /// An answer larger than the broker takes is replaced by an error saying so (it could
    /// never be published, and delivering the request again would not change that).
    pub async fn publish(&self, shared: &Shared, answer: EncodedAnswer, version: Option<&str>) -> bool {
        let max_payload = shared.client.server_info().max_payload;
        let answer = if answer.body.len() + ANSWER_HEADERS_ROOM > max_payload {
            tracing::warn!(
                id = %clip(&self.request_id),
                bytes = answer.body.len(),
                max_payload,
                "an answer is larger than the broker takes; answered 500 instead"
            );
            EncodedAnswer::error(
                500,
                &format!(
                    "the answer ({} bytes) is larger than the NATS server's max_payload ({max_payload} bytes): \
                     ask for fewer items or outputs, or raise max_payload",
                    answer.body.len()
                ),
            )
        } else {
            answer
        };
        let map = AnswerHeaders {
            request_id: &self.request_id,
            sequence: self.sequence,
            model: &self.model,
            version,
            traceparent: self.traceparent.as_deref(),
        }
        .to_map(&answer);
        // Moved, not copied: retries share it.
        let body = bytes::Bytes::from(answer.body);
        let budget = tokio::time::Instant::now() + retry_budget(shared.settings.ack_wait);
        let mut wait = Duration::from_millis(50);
        loop {
            match publish(
                &shared.client,
                &shared.context,
                &self.answer_to,
                map.clone(),
                body.clone(),
            )
            .await
            {
                Ok(()) => return true,
                Err(error) if tokio::time::Instant::now() + wait > budget => {
                    tracing::warn!(id = %clip(&self.request_id), "{error}; the message will be delivered again");
                    return false;
                }
                Err(error) => tracing::debug!(id = %clip(&self.request_id), "{error}; retrying"),
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(Duration::from_secs(2));
        }
    }
}

/// Room left in a message for the answer's headers (the request id is cut to fit).
const ANSWER_HEADERS_ROOM: usize = 4096;

/// Longest request id an answer's headers carry (an `id` of any length is echoed whole in
/// a REST body; a header is cut).
const MAX_ID_BYTES: usize = 1024;

/// `id`, cut to [`MAX_ID_BYTES`] at a character boundary.
fn clip_id(id: &str) -> String {
    crate::model::text::cut_to_bytes(id, MAX_ID_BYTES).to_owned()
}

/// What the inference path answered.
struct Answered {
    answer: EncodedAnswer,
    /// The version that answered (None when no model did).
    version: Option<String>,
}

/// Answers `message` and disposes of it.
pub(super) async fn handle(shared: &Shared, message: jetstream::Message) {
    let (delivered, sequence) = match message.info() {
        Ok(info) => (u64::try_from(info.delivered).unwrap_or(1), info.stream_sequence),
        Err(_) => (1, 0),
    };
    if delivered > 1 {
        if let Some(metrics) = &shared.metrics {
            metrics.count_redelivery();
        }
    }
    let no_headers = HeaderMap::new();
    let headers = message.headers.as_ref().unwrap_or(&no_headers);
    let mut envelope = Envelope::read(shared, message.subject.as_str(), headers, sequence);
    let settings = &shared.settings;
    let work = async {
        let Answered { answer, version } = answer(shared, &mut envelope, headers, message.payload.clone()).await;
        match disposition(
            answer.status,
            answer.retry_after,
            delivered,
            settings.max_deliver,
            settings.nak_delay,
        ) {
            Disposition::Retry(delay) => Some((Outcome::Retried, AckKind::Nak(Some(delay)))),
            kept => match envelope.publish(shared, answer, version.as_deref()).await {
                false => None,
                true if kept == Disposition::Term => Some((Outcome::Terminated, AckKind::Term)),
                true => Some((Outcome::Acked, AckKind::Ack)),
            },
        }
    };
    match with_progress(&message, settings.ack_wait, work).await {
        Some((outcome, kind)) => {
            if let Err(error) = message.ack_with(kind).await {
                tracing::warn!(
                    sequence,
                    "acknowledging a request message failed (it will be delivered again): {error}"
                );
            }
            shared.count(outcome);
        }
        None => shared.count(Outcome::Unanswered),
    }
}

/// The answer to the request in `payload`; the envelope's request id becomes the body's
/// `id` when it has one.
async fn answer(shared: &Shared, envelope: &mut Envelope, headers: &HeaderMap, payload: bytes::Bytes) -> Answered {
    let trace = start_trace(headers, &shared.settings.stream, &envelope.answer_to);
    envelope.traceparent = trace.traceparent();
    let call = match InferCall::start(
        &shared.repository,
        &NATS_EDGE,
        &envelope.model,
        envelope.version.as_deref(),
        trace,
    ) {
        Ok(call) => call,
        Err(error) => {
            return Answered {
                answer: EncodedAnswer::failed(&error),
                version: None,
            }
        }
    };
    let mut version = None;
    let answer = match read(shared, envelope, headers, payload)
        .instrument(call.span().clone())
        .await
    {
        Err((status, message)) => {
            call.failed(status, &message);
            EncodedAnswer::error(status, &message)
        }
        Ok(request) => {
            if let Some(id) = request.id.as_deref().filter(|id| !id.is_empty()) {
                envelope.request_id = clip_id(id);
            }
            match call.run(request).await {
                Ok(inferred) => {
                    version = Some(inferred.model.config.version.clone());
                    match EncodedAnswer::inferred_offloaded(inferred).await {
                        Ok(answer) => answer,
                        Err(error) => {
                            call.failed(error.status(), &error);
                            EncodedAnswer::failed(&error)
                        }
                    }
                }
                Err(error) => EncodedAnswer::failed(&error),
            }
        }
    };
    call.answered(answer.status);
    Answered { answer, version }
}

/// The server span of a message from `stream`, in the trace its headers name (its
/// publisher's context, carried through JetStream); named and described after
/// OpenTelemetry's messaging conventions (a consumer's `process` span).
fn start_trace(headers: &HeaderMap, stream: &str, answer_to: &str) -> RequestTrace {
    let values = |name: &'static str| headers.get_all(name).map(|value| value.as_str().as_bytes());
    let incoming = Incoming::from_headers(values("traceparent"), values("tracestate"));
    let edge = || EdgeSpan {
        name: format!("process {stream}").into(),
        kind: SpanKind::Consumer,
        status: |status| KeyValue::new("tensorplug.status", i64::from(status)),
    };
    RequestTrace::start(incoming, edge, || {
        vec![
            KeyValue::new("messaging.system", "nats"),
            KeyValue::new("messaging.operation.type", "process"),
            KeyValue::new("messaging.destination.name", stream.to_owned()),
            KeyValue::new("tensorplug.answer_subject", clip(answer_to).into_owned()),
        ]
    })
}

/// The request the message carries, if the edge can read it; if not, the status and
/// message REST answers the same body with.
async fn read(
    shared: &Shared,
    envelope: &Envelope,
    headers: &HeaderMap,
    payload: bytes::Bytes,
) -> Result<InferRequest, (u16, String)> {
    if let Some(why) = &envelope.bad_reply_to {
        return Err((400, why.clone()));
    }
    if payload.len() > shared.max_body_bytes {
        return Err((
            413,
            format!(
                "request body is larger than the limit of {} bytes",
                shared.max_body_bytes
            ),
        ));
    }
    let json_header_len = match headers.get(headers::JSON_HEADER_LENGTH) {
        None => None,
        Some(value) => Some(value.as_str().trim().parse::<usize>().map_err(|_| {
            let error = ServeError::Unreadable(format!(
                "header {}: {:?} is not a byte count",
                headers::JSON_HEADER_LENGTH,
                clip(value.as_str())
            ));
            (error.status(), error.to_string())
        })?),
    };
    decode_body(payload, json_header_len)
        .await
        .map_err(|error| (error.status(), error.to_string()))
}

/// Runs `work`, telling the broker every third of the ack wait that the message is being
/// worked on, so that it is not delivered to another replica meanwhile. A replica that
/// dies stops telling, and the message is delivered again once the ack wait has passed.
async fn with_progress<F: Future>(message: &jetstream::Message, ack_wait: Duration, work: F) -> F::Output {
    let period = (ack_wait / 3).max(Duration::from_millis(100));
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    tokio::pin!(work);
    loop {
        tokio::select! {
            output = &mut work => return output,
            _ = ticker.tick() => {
                if let Err(error) = message.ack_with(AckKind::Progress).await {
                    tracing::debug!("telling the broker a message is in progress failed: {error}");
                }
            }
        }
    }
}
