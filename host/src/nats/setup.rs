//! Reaching the broker: the connection (retried for as long as it takes, reconnected when
//! lost), the request stream, the answer stream and the shared durable consumer, each made
//! if missing and left as it is when another replica made it first.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};

use super::settings::NatsSettings;
use crate::serving::Repository;

/// Why the edge could not set up its stream or consumer.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("connecting to NATS at {url}: {reason}")]
    Connect { url: String, reason: String },
    #[error("stream {stream}: {reason}")]
    Stream { stream: String, reason: String },
    #[error("consumer {consumer} of stream {stream}: {reason}")]
    Consumer {
        stream: String,
        consumer: String,
        reason: String,
    },
}

/// The name of the readiness dependency the edge keeps up to date.
pub const BROKER: &str = "nats";

/// Connects to the broker. The first connection is retried in the background (the server
/// serves REST meanwhile); readiness follows the connection when `required`.
pub async fn connect(settings: &NatsSettings, repository: &Arc<Repository>) -> Result<async_nats::Client, SetupError> {
    let state = repository.clone();
    let required = settings.readiness == super::Readiness::Required;
    if required {
        repository.set_dependency(BROKER, false);
    }
    async_nats::ConnectOptions::new()
        .name("tensorplug")
        .retry_on_initial_connect()
        .event_callback(move |event| {
            let state = state.clone();
            async move {
                match event {
                    async_nats::Event::Connected => {
                        tracing::info!("NATS connected");
                        if required {
                            state.set_dependency(BROKER, true);
                        }
                    }
                    async_nats::Event::Disconnected => {
                        tracing::warn!("NATS disconnected: reconnecting");
                        if required {
                            state.set_dependency(BROKER, false);
                        }
                    }
                    other => tracing::info!("NATS: {other}"),
                }
            }
        })
        .connect(settings.urls().as_slice())
        .await
        .map_err(|e| SetupError::Connect {
            url: settings.url.clone(),
            reason: e.to_string(),
        })
}

/// The request stream, the answer stream (if any) and the consumer, as they are or made.
pub async fn streams(
    context: &jetstream::Context,
    settings: &NatsSettings,
) -> Result<consumer::PullConsumer, SetupError> {
    let stream_error = |name: &str, reason: String| SetupError::Stream {
        stream: name.to_owned(),
        reason,
    };
    let requests = context
        .get_or_create_stream(stream::Config {
            name: settings.stream.clone(),
            subjects: vec![format!("{}.>", settings.subject_prefix)],
            retention: stream::RetentionPolicy::WorkQueue,
            storage: stream::StorageType::File,
            ..Default::default()
        })
        .await
        .map_err(|e| stream_error(&settings.stream, e.to_string()))?;
    if let Some(answers) = &settings.answer_stream {
        context
            .get_or_create_stream(stream::Config {
                name: answers.clone(),
                subjects: vec![format!("{}.>", settings.answer_prefix)],
                retention: stream::RetentionPolicy::Limits,
                storage: stream::StorageType::File,
                max_age: settings.answer_max_age,
                duplicate_window: DUPLICATE_WINDOW.min(settings.answer_max_age),
                ..Default::default()
            })
            .await
            .map_err(|e| stream_error(answers, e.to_string()))?;
    }
    let config = consumer::pull::Config {
        durable_name: Some(settings.consumer.clone()),
        ack_policy: consumer::AckPolicy::Explicit,
        ack_wait: settings.ack_wait,
        max_deliver: i64::from(settings.max_deliver),
        filter_subject: format!("{}.>", settings.subject_prefix),
        ..Default::default()
    };
    // Creating an existing durable with the same settings is a no-op; with other settings
    // (another replica's flags) the server updates what may change and refuses the rest.
    requests
        .create_consumer(config)
        .await
        .map_err(|e| SetupError::Consumer {
            stream: settings.stream.clone(),
            consumer: settings.consumer.clone(),
            reason: e.to_string(),
        })
}

/// JetStream's default: a repeated answer within it is dropped by its `Nats-Msg-Id`.
const DUPLICATE_WINDOW: Duration = Duration::from_secs(120);
