//! Simulated NATS JetStream clients (`--protocol nats`), against a `tensorplug serve
//! --nats-url` (the wire format is tensorplug's own, `tensorplug::protocol::nats`): each
//! request is a REST body published on `<prefix>.<model>[.<version>]` through JetStream
//! (awaiting the stream's acknowledgement, as a producer that must not lose requests
//! would), with `Tensorplug-Reply-To: <inbox>.<client>.<n>`; the server publishes the
//! answer there. A closed loop, as client.rs does for REST: a client's next request leaves
//! when the previous answer has come.
//!
//! Every client shares one connection (a NATS client multiplexes one connection; that is
//! how an application talks to its broker) and one subscription to `<inbox>.>`, whose
//! dispatcher task hands each answer to the client its subject names. The subscription is
//! made, and the stream found, before the clock starts: neither is part of any latency.
//!
//! Latency is from just before the publish to the answer's arrival, so it includes the
//! stream's acknowledgement, the broker's two hops and the server's consumer. An answer
//! whose `Tensorplug-Status` is 200 is a success; any other status (or none) is an error
//! whose latency is counted, as a non-2xx answer is for REST. A failed publish, or no
//! answer within the time-out, is an error without latency.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use async_nats::jetstream::context::GetStreamByNameErrorKind;
use async_nats::jetstream::{self, Context as JetStream};
use async_nats::{HeaderMap, Message, Subscriber};
use bytes::Bytes;
use hdrhistogram::Histogram;
use tensorplug::protocol::nats::headers;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_stream::StreamExt;

use crate::client::Schedule;
use crate::report::{quote_body, ClientStats};

/// After a failed publish (the connection is down and reconnecting), wait this long before
/// the next one, so that a dead broker is not hammered.
const ERROR_PAUSE: Duration = Duration::from_millis(20);
/// Between looks for the request stream: the server makes it just after it connects, which
/// may be just after it reports ready.
const STREAM_POLL: Duration = Duration::from_millis(100);
/// How long closing waits for the connection to flush and close.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// Where and what to publish; shared by every client.
pub struct Target {
    /// The broker: `addr` must already be checked to be a loopback address.
    pub addr: SocketAddr,
    /// `<prefix>.<model>[.<version>]`.
    pub subject: String,
    /// REST request bodies, published in rotation (client `i` starts at body `i`); not empty.
    pub bodies: Vec<Bytes>,
}

/// An answer that came for a client, with the request number its subject ends with.
type Answer = (u64, Message);

/// What the clients share: the connection, its JetStream context and the inbox.
struct Shared {
    target: Arc<Target>,
    context: JetStream,
    /// `<inbox>.`: client `i`'s request `n` is answered on `<inbox>.<i>.<n>`.
    inbox_prefix: String,
}

/// The connection, to be closed once every client has finished.
pub struct Connection {
    client: async_nats::Client,
    dispatcher: JoinHandle<()>,
}

/// One client: its place in the shared connection and the answers meant for it.
pub struct Client {
    index: usize,
    shared: Arc<Shared>,
    answers: mpsc::UnboundedReceiver<Answer>,
}

/// Connects to the broker, finds the stream that keeps the request subject (waiting up to
/// `timeout` for the server to make it) and subscribes to the inbox, for `clients` clients.
pub async fn connect(target: Arc<Target>, clients: usize, timeout: Duration) -> Result<(Connection, Vec<Client>)> {
    let url = format!("nats://{}", target.addr);
    let client = async_nats::ConnectOptions::new()
        .name("tensorplug-loadgen")
        .connection_timeout(timeout)
        .connect(url.as_str())
        .await
        .with_context(|| format!("connecting to NATS at {url}"))?;
    let mut context = jetstream::new(client.clone());
    // The acknowledgement is awaited within each request's own time-out (--timeout), not
    // JetStream's default of 5 s.
    context.set_timeout(timeout);
    find_stream(&context, &target.subject, timeout).await?;

    let inbox = client.new_inbox();
    let subscription = client
        .subscribe(format!("{inbox}.>"))
        .await
        .with_context(|| format!("subscribing to the answers' inbox {inbox}.>"))?;
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..clients).map(|_| mpsc::unbounded_channel()).unzip();
    let inbox_prefix = format!("{inbox}.");
    let dispatcher = tokio::spawn(dispatch(subscription, inbox_prefix.clone(), senders));
    let shared = Arc::new(Shared {
        target,
        context,
        inbox_prefix,
    });
    let clients = receivers
        .into_iter()
        .enumerate()
        .map(|(index, answers)| Client {
            index,
            shared: shared.clone(),
            answers,
        })
        .collect();
    Ok((Connection { client, dispatcher }, clients))
}

impl Connection {
    /// Stops taking answers and closes the connection.
    pub async fn close(self) {
        self.dispatcher.abort();
        // Every client has its last answer (or gave up on it): nothing is left to flush that
        // matters, so a slow or failed close is no error of the run.
        let _ = tokio::time::timeout(CLOSE_GRACE, self.client.drain()).await;
    }
}

/// Waits until a stream keeps `subject`, for at most `timeout`.
async fn find_stream(context: &JetStream, subject: &str, timeout: Duration) -> Result<String> {
    let deadline = Instant::now() + timeout;
    loop {
        let error = match context.stream_by_subject(subject).await {
            Ok(stream) => return Ok(stream),
            Err(error) => error,
        };
        let retry = matches!(
            error.kind(),
            GetStreamByNameErrorKind::NotFound | GetStreamByNameErrorKind::Request
        );
        if !retry || Instant::now() + STREAM_POLL >= deadline {
            bail!(
                "no JetStream stream keeps the subject {subject} (is a tensorplug server with --nats-url \
                 running, with the same --nats-subject-prefix, on a nats-server with -js?): {error}"
            );
        }
        tokio::time::sleep(STREAM_POLL).await;
    }
}

/// Hands every answer on `<inbox>.<client>.<n>` to its client. When the subscription ends
/// (the connection closed), the senders go with it: every waiting client hears at once.
async fn dispatch(mut subscription: Subscriber, prefix: String, clients: Vec<mpsc::UnboundedSender<Answer>>) {
    while let Some(message) = subscription.next().await {
        let Some((client, n)) = route(&prefix, message.subject.as_str()) else {
            continue;
        };
        if let Some(sender) = clients.get(client) {
            // A client that has finished no longer listens: its late answer is dropped.
            let _ = sender.send((n, message));
        }
    }
}

/// The client and request number an answer subject `<inbox>.<client>.<n>` ends with.
fn route(prefix: &str, subject: &str) -> Option<(usize, u64)> {
    let (client, n) = subject.strip_prefix(prefix)?.split_once('.')?;
    Some((client.parse().ok()?, n.parse().ok()?))
}

/// Runs one client until `schedule.end`; returns what it counted.
pub async fn run(mut client: Client, schedule: Schedule, histogram: Histogram<u64>) -> ClientStats {
    let mut stats = ClientStats::new(histogram);
    let shared = client.shared.clone();
    let bodies = &shared.target.bodies;
    // Each client starts at its own line, so concurrent requests carry different bodies.
    let mut next_body = client.index;
    let mut n: u64 = 0;

    loop {
        let Some(body) = bodies.get(next_body % bodies.len().max(1)).cloned() else {
            break;
        };
        next_body = next_body.wrapping_add(1);
        n += 1;
        let mut map = HeaderMap::new();
        map.insert(
            headers::REPLY_TO,
            format!("{}{}.{n}", shared.inbox_prefix, client.index).as_str(),
        );

        let started = Instant::now();
        if started >= schedule.end {
            break;
        }
        let counted = started >= schedule.measure_from;
        let outcome =
            tokio::time::timeout(schedule.timeout, exchange(&shared, &mut client.answers, map, body, n)).await;
        let latency = started.elapsed();
        match outcome {
            Ok(Ok(answer)) => {
                if counted {
                    count_answer(&mut stats, latency, &answer);
                }
            }
            Ok(Err(e)) => {
                stats.count_error(counted, format!("{e:#}"));
                tokio::time::sleep(ERROR_PAUSE).await;
            }
            // The answer may still come: it is dropped when it does (its number is past).
            Err(_) => stats.count_error(counted, format!("no answer within {:?}", schedule.timeout)),
        }
    }
    stats
}

/// Publishes request `n`, waits for the stream's acknowledgement, then for its answer.
async fn exchange(
    shared: &Shared,
    answers: &mut mpsc::UnboundedReceiver<Answer>,
    map: HeaderMap,
    body: Bytes,
    n: u64,
) -> Result<Message> {
    let subject = &shared.target.subject;
    let ack = shared
        .context
        .publish_with_headers(subject.clone(), map, body)
        .await
        .with_context(|| format!("publishing to {subject}"))?;
    ack.await
        .with_context(|| format!("the stream's acknowledgement of a request on {subject}"))?;
    loop {
        let (number, message) = answers
            .recv()
            .await
            .context("the answers' subscription ended (the NATS connection closed)")?;
        // An earlier request's answer that came after its time was up: not this one.
        if number == n {
            return Ok(message);
        }
    }
}

/// `Tensorplug-Status: 200` is a success; anything else an error with its latency.
fn count_answer(stats: &mut ClientStats, latency: Duration, answer: &Message) {
    let status = answer
        .headers
        .as_ref()
        .and_then(|map| map.get(headers::STATUS))
        .map(|value| value.as_str().trim());
    match status {
        Some("200") => stats.count_success(latency),
        Some(status) => stats.count_failure(latency, || {
            format!("{} {status}: {}", headers::STATUS, quote_body(&answer.payload))
        }),
        None => stats.count_failure(latency, || {
            format!("an answer without {}: {}", headers::STATUS, quote_body(&answer.payload))
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_routed_by_client_and_number() {
        let prefix = "_INBOX.abc.";
        assert_eq!(route(prefix, "_INBOX.abc.0.1"), Some((0, 1)));
        assert_eq!(route(prefix, "_INBOX.abc.31.9000"), Some((31, 9000)));
        assert_eq!(route(prefix, "_INBOX.abc.3"), None);
        assert_eq!(route(prefix, "_INBOX.abc.x.1"), None);
        assert_eq!(route(prefix, "_INBOX.abc.1.2.3"), None);
        assert_eq!(route(prefix, "_INBOX.other.0.1"), None);
    }

    #[test]
    fn only_status_200_is_a_success() {
        let template = Histogram::new_with_bounds(1, 60_000_000, 3).expect("bounds");
        let answer = |status: Option<&str>, body: &'static str| {
            let headers = status.map(|status| {
                let mut map = HeaderMap::new();
                map.insert(headers::STATUS, status);
                map
            });
            Message {
                subject: "_INBOX.a.0.1".into(),
                reply: None,
                payload: Bytes::from_static(body.as_bytes()),
                headers,
                status: None,
                description: None,
                length: body.len(),
            }
        };
        let mut stats = ClientStats::new(template);
        count_answer(&mut stats, Duration::from_micros(10), &answer(Some("200"), "{}"));
        count_answer(
            &mut stats,
            Duration::from_micros(10),
            &answer(Some("503"), "queue full"),
        );
        count_answer(&mut stats, Duration::from_micros(10), &answer(None, ""));
        assert_eq!(stats.counts(), (1, 2));
        assert_eq!(stats.first_error(), Some("Tensorplug-Status 503: queue full"));
    }
}
