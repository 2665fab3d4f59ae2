//! The queue edge's metrics: what became of the messages this replica was delivered
//! (`tensorplug_nats_messages_total` by outcome), redeliveries it saw, what it holds now,
//! and the shared consumer's backlog as the broker reports it (polled): messages not yet
//! delivered to any replica (the lag), delivered but unacknowledged, and redelivered.
//! Requests are also counted per model with `protocol="nats"`, like REST's and gRPC's.

use std::time::Duration;

use async_nats::jetstream::consumer::PullConsumer;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// What became of a delivered message.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Outcome {
    /// Answered and acknowledged.
    Acked,
    /// Answered and terminated (a client error: never delivered again).
    Terminated,
    /// Handed back unanswered (its model's queue was full), for a later delivery.
    Retried,
    /// Delivered as often as allowed without an answer: answered with an error and removed.
    GivenUp,
    /// Its answer could not be published (the broker unreachable): left to be delivered
    /// again.
    Unanswered,
}

impl Outcome {
    fn label(self) -> &'static str {
        match self {
            Outcome::Acked => "acked",
            Outcome::Terminated => "terminated",
            Outcome::Retried => "retried",
            Outcome::GivenUp => "given_up",
            Outcome::Unanswered => "unanswered",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

/// The queue edge's metrics.
#[derive(Clone, Debug, Default)]
pub struct NatsMetrics {
    messages: Family<OutcomeLabels, Counter>,
    redeliveries: Counter,
    in_flight: Gauge,
    connected: Gauge,
    pending: Gauge,
    ack_pending: Gauge,
    redelivered: Gauge,
}

impl NatsMetrics {
    /// The metrics, registered in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "tensorplug_nats_messages",
            "Request messages this replica was delivered, by outcome: acked, terminated (a client \
             error), retried (handed back: the model's queue was full), given_up (max deliveries \
             reached, answered with an error), unanswered (the answer could not be published)",
            metrics.messages.clone(),
        );
        registry.register(
            "tensorplug_nats_redeliveries",
            "Request messages this replica was delivered that had been delivered before",
            metrics.redeliveries.clone(),
        );
        registry.register(
            "tensorplug_nats_in_flight_messages",
            "Request messages this replica holds now (pulled, not yet acknowledged)",
            metrics.in_flight.clone(),
        );
        registry.register(
            "tensorplug_nats_connected",
            "1 while this replica is connected to NATS",
            metrics.connected.clone(),
        );
        registry.register(
            "tensorplug_nats_consumer_pending_messages",
            "Messages of the shared consumer not yet delivered to any replica (its lag), as the \
             broker last reported it",
            metrics.pending.clone(),
        );
        registry.register(
            "tensorplug_nats_consumer_ack_pending_messages",
            "Messages of the shared consumer delivered and not yet acknowledged, by any replica",
            metrics.ack_pending.clone(),
        );
        registry.register(
            "tensorplug_nats_consumer_redelivered_messages",
            "Messages of the shared consumer delivered more than once and still unacknowledged",
            metrics.redelivered.clone(),
        );
        metrics
    }

    pub fn count(&self, outcome: Outcome) {
        self.messages
            .get_or_create(&OutcomeLabels {
                outcome: outcome.label(),
            })
            .inc();
    }

    pub fn count_redelivery(&self) {
        self.redeliveries.inc();
    }

    pub fn set_in_flight(&self, messages: usize) {
        self.in_flight.set(i64::try_from(messages).unwrap_or(i64::MAX));
    }

    pub fn set_connected(&self, connected: bool) {
        self.connected.set(i64::from(connected));
    }

    fn gauge_of(gauge: &Gauge<i64, std::sync::atomic::AtomicI64>, value: u64) {
        gauge.set(i64::try_from(value).unwrap_or(i64::MAX));
    }
}

/// How often the consumer's backlog is read from the broker.
const POLL: Duration = Duration::from_secs(2);

/// Keeps the consumer gauges up to date, until dropped.
pub(super) async fn follow_consumer(consumer: PullConsumer, metrics: NatsMetrics, client: async_nats::Client) {
    let mut ticker = tokio::time::interval(POLL);
    loop {
        ticker.tick().await;
        metrics.set_connected(client.connection_state() == async_nats::connection::State::Connected);
        if let Ok(info) = consumer.get_info().await {
            NatsMetrics::gauge_of(&metrics.pending, info.num_pending);
            NatsMetrics::gauge_of(&metrics.ack_pending, info.num_ack_pending as u64);
            NatsMetrics::gauge_of(&metrics.redelivered, info.num_redelivered as u64);
        }
    }
}
