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

impl NatsSettings {
    /// The servers `url` names, comma-separated.
    pub fn urls(&self) -> Vec<&str> {
        self.url
            .split(',')
            .map(str::trim)
            .filter(|url| !url.is_empty())
            .collect()
    }

    /// Refuses names the broker would refuse later, or subjects that would never match:
    /// said at start, by flag.
    pub fn validate(&self) -> Result<(), String> {
        if self.urls().is_empty() {
            return Err("--nats-url: no server given".into());
        }
        for (flag, name) in [("--nats-stream", &self.stream), ("--nats-consumer", &self.consumer)]
            .into_iter()
            .chain(self.answer_stream.iter().map(|name| ("--nats-answer-stream", name)))
        {
            if name.is_empty()
                || name.len() > 255
                || !name.bytes().all(|b| b.is_ascii_graphic() && !b".*>/\\".contains(&b))
            {
                return Err(format!(
                    "{flag} {name:?}: a name of 1 to 255 printable ASCII characters without `.`, `*`, `>`, `/`, `\\` or spaces"
                ));
            }
        }
        for (flag, prefix) in [
            ("--nats-subject-prefix", &self.subject_prefix),
            ("--nats-answer-prefix", &self.answer_prefix),
        ] {
            crate::protocol::nats::publishable(prefix).map_err(|_| {
                format!("{flag} {prefix:?}: a subject of printable ASCII tokens separated by `.`, without wildcards")
            })?;
        }
        let within = |a: &str, b: &str| a == b || a.starts_with(&format!("{b}."));
        if within(&self.subject_prefix, &self.answer_prefix) || within(&self.answer_prefix, &self.subject_prefix) {
            return Err(
                "--nats-subject-prefix and --nats-answer-prefix must differ, neither below the other: \
                        answers would be taken for requests"
                    .into(),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults() -> NatsSettings {
        NatsSettings {
            url: "nats://a:4222, nats://b:4222".into(),
            stream: "TENSORPLUG_INFER".into(),
            subject_prefix: "tensorplug.infer".into(),
            answer_prefix: "tensorplug.answers".into(),
            answer_stream: Some("TENSORPLUG_ANSWERS".into()),
            answer_max_age: Duration::from_secs(3600),
            consumer: "tensorplug".into(),
            ack_wait: Duration::from_secs(30),
            max_deliver: 5,
            pull_batch: 64,
            nak_delay: Duration::from_secs(1),
            readiness: Readiness::Required,
        }
    }

    #[test]
    fn several_servers_are_comma_separated() {
        assert_eq!(defaults().urls(), ["nats://a:4222", "nats://b:4222"]);
        assert_eq!(defaults().validate(), Ok(()));
    }

    #[test]
    fn names_and_subjects_the_broker_would_refuse_are_refused_by_flag() {
        type Change = fn(&mut NatsSettings);
        let cases: Vec<(Change, &str)> = vec![
            (|s| s.stream = "A.B".into(), "--nats-stream"),
            (|s| s.consumer = "".into(), "--nats-consumer"),
            (|s| s.answer_stream = Some("A B".into()), "--nats-answer-stream"),
            (|s| s.subject_prefix = "a.>".into(), "--nats-subject-prefix"),
            (|s| s.answer_prefix = "a..b".into(), "--nats-answer-prefix"),
            (|s| s.answer_prefix = "tensorplug.infer".into(), "must differ"),
            (|s| s.answer_prefix = "tensorplug.infer.answers".into(), "must differ"),
            (|s| s.url = " , ".into(), "--nats-url"),
        ];
        for (change, named) in cases {
            let mut settings = defaults();
            change(&mut settings);
            let error = settings.validate().expect_err(named);
            assert!(error.contains(named), "{error}");
        }
    }
}
