//! [`NatsSettings`]: how the queue edge reaches its broker and consumes, as the command
//! line gave it (`tensorplug serve --nats-*`, app::config).

use std::time::Duration;

/// The queue edge's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NatsSettings {
    /// `nats://host:port` (several, comma-separated, for a cluster).
    pub url: String,
    /// The stream requests are stored in (work-queue retention; created if missing).
    pub stream: String,
    /// Requests are published on `<prefix>.<model>` and `<prefix>.<model>.<version>`.
    pub subject_prefix: String,
    /// Answers go to `<prefix>.<model>` unless the request names its own subject.
    pub answer_prefix: String,
    /// The stream that keeps answers on `<answer prefix>.>` (created if missing), None: the
    /// server creates none (answers go to whatever stream, or subscriber, there is).
    pub answer_stream: Option<String>,
    /// How long the answer stream keeps an answer.
    pub answer_max_age: Duration,
    /// The durable consumer every replica shares.
    pub consumer: String,
    /// How long a delivered message may go unacknowledged before it is delivered again
    /// (to any replica); a message being worked on is kept from it by progress signals.
    pub ack_wait: Duration,
    /// Deliveries of one message before it is given up (and answered with an error).
    pub max_deliver: u32,
    /// Most messages this replica holds at once (pulled and not yet acknowledged); each
    /// pull asks for no more than the free ones.
    pub pull_batch: usize,
    /// How long a message handed back because its model's queue is full waits before its
    /// next delivery.
    pub nak_delay: Duration,
    /// Whether the server's readiness waits on the broker connection.
    pub readiness: Readiness,
}

/// Whether `/v2/health/ready` (and gRPC's) turns false while the broker is unreachable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Readiness {
    /// Not ready while disconnected: a replica that cannot consume is not serving.
    Required,
    /// Readiness is the models' alone (REST and gRPC serve on without the broker).
    Ignored,
}
