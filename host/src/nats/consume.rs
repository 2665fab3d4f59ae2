//! The pull loop: this replica asks the shared consumer for as many messages as it has free
//! slots (never more: the backlog stays in the stream, not in memory), handles each on its
//! own task, and on shutdown stops asking, lets its last pull end and answers what it holds.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_stream::StreamExt;

use super::message::{handle, Shared};
use super::metrics::{follow_consumer, NatsMetrics};
use super::settings::NatsSettings;
use super::setup::{self, SetupError};
use crate::serving::Repository;

/// How long one pull waits for messages before it is renewed; also the longest a
/// shutdown waits for the last pull to end.
const PULL_EXPIRY: Duration = Duration::from_secs(1);

/// What the queue edge needs from the server.
pub struct NatsEdge {
    pub settings: NatsSettings,
    pub repository: Arc<Repository>,
    /// REST's body limit, held to the messages' bodies too.
    pub max_body_bytes: usize,
    pub metrics: Option<NatsMetrics>,
}

/// Consumes and answers requests until `stop` resolves, then answers the messages it holds
/// and returns. Setting up the streams and the consumer is retried until it succeeds (the
/// broker may come up after the server).
pub async fn serve(edge: NatsEdge, stop: impl Future<Output = ()>) -> Result<(), SetupError> {
    let NatsEdge {
        settings,
        repository,
        max_body_bytes,
        metrics,
    } = edge;
    let client = setup::connect(&settings, &repository).await?;
    let context = jetstream::new(client.clone());
    tokio::pin!(stop);
    let mut wait = Duration::from_millis(100);
    let consumer = loop {
        tokio::select! {
            () = &mut stop => return Ok(()),
            made = setup::streams(&context, &settings) => match made {
                Ok(consumer) => break consumer,
                Err(error) => tracing::warn!("NATS: {error} (retrying)"),
            },
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(Duration::from_secs(5));
    };
    tracing::info!(
        stream = %settings.stream,
        consumer = %settings.consumer,
        subjects = %format!("{}.>", settings.subject_prefix),
        "consuming inference requests from NATS JetStream"
    );
    let pull_batch = settings.pull_batch;
    let shared = Arc::new(Shared {
        client: client.clone(),
        context,
        settings,
        repository,
        max_body_bytes,
        metrics: metrics.clone(),
    });
    let mut background = JoinSet::new();
    background.spawn(super::poison::answer_given_up(shared.clone()));
    if let Some(metrics) = metrics.clone() {
        background.spawn(follow_consumer(consumer.clone(), metrics, client.clone()));
    }
    let slots = Arc::new(Semaphore::new(pull_batch));
    let mut handlers = JoinSet::new();
    let mut stopping = false;
    while !stopping {
        let first = tokio::select! {
            () = &mut stop => break,
            permit = slots.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
        };
        let mut permits = vec![first];
        while permits.len() < pull_batch {
            match slots.clone().try_acquire_owned() {
                Ok(permit) => permits.push(permit),
                Err(_) => break,
            }
        }
        let pull = consumer
            .batch()
            .max_messages(permits.len())
            .expires(PULL_EXPIRY)
            .messages();
        let mut messages = match pull.await {
            Ok(messages) => messages,
            Err(error) => {
                tracing::debug!("NATS pull failed (retrying): {error}");
                tokio::select! {
                    () = &mut stop => break,
                    () = tokio::time::sleep(Duration::from_millis(500)) => continue,
                }
            }
        };
        // A pull runs to its end (at most PULL_EXPIRY) even when the stop comes: what the
        // broker delivers for it is handled, not left to wait out the ack wait.
        loop {
            let next = tokio::select! {
                next = messages.next() => next,
                () = &mut stop, if !stopping => {
                    stopping = true;
                    continue;
                }
            };
            match next {
                None => break,
                Some(Err(error)) => {
                    tracing::debug!("NATS pull ended: {error}");
                    break;
                }
                Some(Ok(message)) => {
                    let Some(permit) = permits.pop() else { break };
                    let shared = shared.clone();
                    let held = slots.clone();
                    handlers.spawn(async move {
                        handle(&shared, message).await;
                        drop(permit);
                        if let Some(metrics) = &shared.metrics {
                            metrics.set_in_flight(pull_batch.saturating_sub(held.available_permits()));
                        }
                    });
                    if let Some(metrics) = &metrics {
                        metrics.set_in_flight(pull_batch.saturating_sub(slots.available_permits() + permits.len()));
                    }
                }
            }
        }
        while handlers.try_join_next().is_some() {}
    }
    drop(slots);
    while handlers.join_next().await.is_some() {}
    background.abort_all();
    // The last acknowledgements go out before the connection does.
    if let Err(error) = client.flush().await {
        tracing::warn!("NATS: flushing the last acknowledgements failed: {error}");
    }
    tracing::info!("stopped consuming from NATS");
    Ok(())
}
