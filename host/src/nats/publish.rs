//! Publishing an answer: its headers, and the publish itself — acknowledged by JetStream
//! when a stream keeps the subject, a plain publish when none does.

use std::time::Duration;

use async_nats::jetstream::context::PublishErrorKind;
use async_nats::HeaderMap;

use crate::api::EncodedAnswer;
use crate::protocol::nats::headers;

/// What an answer says about its request, besides its body.
pub struct AnswerHeaders<'a> {
    pub request_id: &'a str,
    pub sequence: u64,
    /// The model as the request named it.
    pub model: &'a str,
    /// The version that answered, when a model did.
    pub version: Option<&'a str>,
    /// The server span's `traceparent` (tracing on).
    pub traceparent: Option<&'a str>,
}

impl AnswerHeaders<'_> {
    /// The answer message's headers.
    pub fn to_map(&self, answer: &EncodedAnswer) -> HeaderMap {
        let mut map = HeaderMap::new();
        map.insert(headers::REQUEST_ID, self.request_id);
        // A repeated answer (a message answered twice: its first replica died after
        // publishing, before acknowledging) is dropped by a stream's duplicate window.
        map.insert(headers::MSG_ID, self.request_id);
        map.insert(headers::REQUEST_SEQUENCE, self.sequence.to_string().as_str());
        map.insert(headers::MODEL, self.model);
        if let Some(version) = self.version {
            map.insert(headers::MODEL_VERSION, version);
        }
        map.insert(headers::STATUS, answer.status.to_string().as_str());
        if let Some(traceparent) = self.traceparent {
            map.insert("traceparent", traceparent);
        }
        match answer.json_header_len {
            Some(len) => {
                map.insert(headers::CONTENT_TYPE, "application/octet-stream");
                map.insert(headers::JSON_HEADER_LENGTH, len.to_string().as_str());
            }
            None => map.insert(headers::CONTENT_TYPE, "application/json"),
        }
        map
    }
}

/// Why an answer was not published.
#[derive(Debug, thiserror::Error)]
#[error("publishing the answer to {subject}: {reason}")]
pub struct PublishError {
    subject: String,
    reason: String,
}

/// Publishes `body` to `subject`: through JetStream, waiting for the stream's
/// acknowledgement, when a stream keeps the subject; as a plain message otherwise (a
/// client's inbox). Either way, on return the broker has it, or an error says why not.
pub async fn publish(
    client: &async_nats::Client,
    context: &async_nats::jetstream::Context,
    subject: &str,
    map: HeaderMap,
    body: bytes::Bytes,
) -> Result<(), PublishError> {
    // One owned copy for both tries (the client takes subjects by value).
    let subject: async_nats::Subject = subject.into();
    let failed = |subject: &str, reason: String| PublishError {
        subject: subject.to_owned(),
        reason,
    };
    // Inboxes are a client's own subjects, never kept by a stream: one trip, not two.
    if !subject.starts_with("_INBOX.") {
        let acked = match context
            .publish_with_headers(subject.clone(), map.clone(), body.clone())
            .await
        {
            Ok(ack) => ack.await.map(drop),
            Err(error) => Err(error),
        };
        match acked {
            Ok(()) => return Ok(()),
            Err(error) if error.kind() == PublishErrorKind::StreamNotFound => {}
            Err(error) => return Err(failed(&subject, error.to_string())),
        }
    }
    client
        .publish_with_headers(subject.clone(), map, body)
        .await
        .map_err(|e| failed(&subject, e.to_string()))?;
    // The acknowledgement that follows goes out on the same connection, after it: the
    // broker has the answer before it sees the request acknowledged.
    Ok(())
}

/// How long to keep retrying a publish that failed (the broker restarting) before the
/// message is left to be delivered again.
pub fn retry_budget(ack_wait: Duration) -> Duration {
    ack_wait.mul_f64(0.8)
}
