//! Messages delivered as often as the consumer allows without being answered: every
//! replica they reached died or ran out of its ack wait before answering (a request that
//! takes a replica down with it, or plain bad luck). JetStream stops delivering such a
//! message, keeps it in the work-queue stream and says so in an advisory; one replica
//! (a queue group) answers it with an error and removes it, so that its client is not left
//! waiting and it does not sit in the stream for ever.

use std::sync::Arc;

use tokio_stream::StreamExt;

use super::message::{Envelope, Shared};
use super::metrics::Outcome;
use crate::api::EncodedAnswer;

#[derive(serde::Deserialize)]
struct MaxDeliveries {
    stream_seq: u64,
    deliveries: u64,
}

/// The status a given-up request is answered with.
const GIVEN_UP: u16 = 500;

/// Answers every message the consumer gives up on, until dropped.
pub(super) async fn answer_given_up(shared: Arc<Shared>) {
    let settings = &shared.settings;
    let subject = format!(
        "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{}.{}",
        settings.stream, settings.consumer
    );
    let mut advisories = match shared.client.queue_subscribe(subject, "tensorplug".into()).await {
        Ok(subscriber) => subscriber,
        Err(error) => {
            tracing::error!("subscribing to max-deliveries advisories failed: {error}");
            return;
        }
    };
    while let Some(advisory) = advisories.next().await {
        let Ok(advisory) = serde_json::from_slice::<MaxDeliveries>(&advisory.payload) else {
            continue;
        };
        if let Err(error) = answer_one(&shared, &advisory).await {
            tracing::warn!(
                sequence = advisory.stream_seq,
                "answering a request given up after {} deliveries failed: {error}",
                advisory.deliveries
            );
        }
    }
}

async fn answer_one(shared: &Shared, advisory: &MaxDeliveries) -> Result<(), String> {
    let stream = shared
        .context
        .get_stream(&shared.settings.stream)
        .await
        .map_err(|e| e.to_string())?;
    // Gone already: acknowledged late by a replica that was only slow.
    let Ok(message) = stream.get_raw_message(advisory.stream_seq).await else {
        return Ok(());
    };
    let mut envelope = Envelope::read(shared, message.subject.as_str(), &message.headers, message.sequence);
    if message.payload.len() <= shared.max_body_bytes {
        if let Ok(IdOnly { id: Some(id) }) = serde_json::from_slice::<IdOnly>(&message.payload) {
            envelope.request_id = id;
        }
    }
    let answer = EncodedAnswer::error(
        GIVEN_UP,
        &format!(
            "the request was not answered after {} deliveries: each replica it was delivered to \
             stopped or took longer than the ack wait ({} s) before answering; it is not delivered again",
            advisory.deliveries,
            shared.settings.ack_wait.as_secs_f64()
        ),
    );
    tracing::warn!(
        model = %envelope.model,
        id = %envelope.request_id,
        deliveries = advisory.deliveries,
        "request given up: answered {GIVEN_UP}"
    );
    if !envelope.publish(shared, answer, None).await {
        return Err("the answer could not be published".into());
    }
    stream
        .delete_message(advisory.stream_seq)
        .await
        .map_err(|e| e.to_string())?;
    shared.count(Outcome::GivenUp);
    Ok(())
}

/// A request body's `id`, whatever else it holds.
#[derive(serde::Deserialize)]
struct IdOnly {
    #[serde(default)]
    id: Option<String>,
}
