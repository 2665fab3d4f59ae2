//! NATS JetStream: each request published on `<prefix>.<model>[.<version>]`, into the
//! stream that a `tensorplug serve --nats-url` consumes (the wire format is
//! [`crate::protocol::nats`]: the body is a REST body, the answer a REST answer body), and
//! its answer sent back to this run's own inbox. What this module owns: the one connection
//! every worker shares, the one subscription to `<inbox>.>` that takes every answer, and
//! the dispatcher task that hands each answer to the request waiting on its subject.
//!
//! NATS has no metadata route, so the run cannot tell whether the model batches: lines are
//! sent one by one ([`ModelInfo::batches`] is false).

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::context::{GetStreamByNameErrorKind, PublishErrorKind};
use async_nats::jetstream::{self, Context};
use async_nats::{ConnectErrorKind, HeaderMap, HeaderName, HeaderValue, Message, ServerAddr, Subscriber};
use bytes::Bytes;
use tokio::sync::oneshot;
use tokio_stream::StreamExt;

use super::rest::chain;
use super::{parse_headers, rest_reply, setup_backoff, Failure, ModelInfo, Reply, SetupError};
use crate::batch::options::Options;
use crate::protocol::client::{encode_request, BodyForm};
use crate::protocol::nats::{self as wire, headers};
use crate::protocol::InferRequest;
use crate::sync::lock;
use crate::traces::ClientTrace;

/// Publishes of one request per attempt: a publish whose acknowledgement did not come may
/// still have been stored, so it is sent again with the same `Nats-Msg-Id`, which the
/// stream drops if it has it already.
const PUBLISH_TRIES: u32 = 3;

/// How long closing waits for the connection to flush and close.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// The requests waiting for an answer, by the number their answer subject ends with.
type Waiters = Mutex<HashMap<u64, oneshot::Sender<Message>>>;

pub(crate) struct Nats {
    pub info: ModelInfo,
    client: async_nats::Client,
    context: Context,
    /// Where requests are published.
    subject: String,
    /// This run's inbox: request `n`'s answer comes on `<inbox>.<n>`.
    inbox: String,
    /// Request `n`'s `Nats-Msg-Id` is `<msg_id_prefix>-<n>`: the inbox's own unique
    /// token, so that no other run (nor a resumed one) reuses an id.
    msg_id_prefix: String,
    /// `--request-headers`, checked.
    headers: Vec<(HeaderName, HeaderValue)>,
    form: BodyForm,
    timeout: Duration,
    /// The next request's number (one per attempt: a retried line's answer is not its
    /// earlier attempt's, which may still come, late).
    next: AtomicU64,
    waiters: Arc<Waiters>,
    dispatcher: tokio::task::JoinHandle<()>,
}

impl Nats {
    /// A connection to the NATS server at `url`, after a stream is found to keep the
    /// request subject (a tensorplug server made it), subscribed to this run's inbox.
    pub(crate) async fn connect(url: &str, options: &Options) -> Result<Nats, SetupError> {
        let servers = server_addrs(url)?;
        let user_headers = request_headers(&parse_headers(&options.headers)?)?;
        let subject = publish_subject(
            &options.nats_subject_prefix,
            &options.model,
            options.model_version.as_deref(),
        )?;
        let client = connect_client(url, servers, options).await?;
        let context = jetstream::new(client.clone());
        find_stream(&context, url, &subject, options).await?;
        let inbox = client.new_inbox();
        let answers = client
            .subscribe(format!("{inbox}.>"))
            .await
            .map_err(|e| SetupError::Unreachable {
                url: url.to_owned(),
                reason: format!("subscribing to the answers' inbox {inbox}.>: {}", chain(&e)),
            })?;
        let waiters = Arc::new(Waiters::default());
        let dispatcher = tokio::spawn(dispatch(answers, format!("{inbox}."), waiters.clone()));
        let msg_id_prefix = inbox.rsplit('.').next().unwrap_or(&inbox).to_owned();
        Ok(Nats {
            info: ModelInfo {
                name: options.model.clone(),
                version: options.model_version.clone().unwrap_or_default(),
                batches: false,
            },
            client,
            context,
            subject,
            inbox,
            msg_id_prefix,
            headers: user_headers,
            form: BodyForm {
                binary_inputs: options.binary_data,
                binary_outputs: options.binary_data,
            },
            timeout: options.timeout,
            next: AtomicU64::new(0),
            waiters,
            dispatcher,
        })
    }

    pub(crate) async fn infer(&self, request: InferRequest, trace: &ClientTrace) -> Result<Reply, Failure> {
        let encoded = encode_request(&request, self.form);
        drop(request);
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let mut map = message_headers(
            &self.headers,
            &self.inbox,
            &self.msg_id_prefix,
            n,
            encoded.json_header_len,
        );
        if let Some(traceparent) = trace.traceparent() {
            map.insert("traceparent", traceparent);
        }
        // Waiting before publishing: the answer may come before the publish is acknowledged.
        let (sender, answer) = oneshot::channel();
        let _waiting = Waiting::new(&self.waiters, n, sender);
        let body = Bytes::from(encoded.body);
        let exchange = async {
            self.publish(map, body).await?;
            answer
                .await
                .map_err(|_| Failure::no_answer("the NATS connection closed before the answer came".into(), true))
        };
        let message = match tokio::time::timeout(self.timeout, exchange).await {
            Err(_) => return Err(Failure::timed_out(self.timeout)),
            Ok(result) => result?,
        };
        read_answer(message.headers.as_ref(), &message.payload, message.subject.as_str())
    }

    /// Publishes through JetStream and waits for the stream's acknowledgement: on return
    /// the request is stored, to be consumed by a server.
    async fn publish(&self, map: HeaderMap, body: Bytes) -> Result<(), Failure> {
        let mut tries = 0;
        loop {
            tries += 1;
            let acked = match self
                .context
                .publish_with_headers(self.subject.clone(), map.clone(), body.clone())
                .await
            {
                Ok(ack) => ack.await.map(drop),
                Err(error) => Err(error),
            };
            let error = match acked {
                Ok(()) => return Ok(()),
                Err(error) => error,
            };
            let message = format!("publishing to {}: {}", self.subject, chain(&error));
            match after_publish_error(error.kind()) {
                AfterPublishError::Republish if tries < PUBLISH_TRIES => {
                    tracing::debug!("{message} (publishing again, under the same message id)");
                }
                AfterPublishError::Republish => return Err(Failure::no_answer(message, true)),
                AfterPublishError::Fail { status, retryable } => {
                    return Err(Failure {
                        status,
                        message,
                        retryable,
                        retry_after: None,
                    })
                }
            }
        }
    }

    /// Stops taking answers and closes the connection (what is still buffered is sent).
    pub(crate) async fn close(&self) {
        self.dispatcher.abort();
        match tokio::time::timeout(CLOSE_GRACE, self.client.drain()).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::debug!("closing the NATS connection: {}", chain(&error)),
            Err(_) => tracing::debug!("closing the NATS connection took more than {CLOSE_GRACE:?}"),
        }
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        // The dispatcher holds the subscription; a transport dropped without `close`
        // must not leave it running.
        self.dispatcher.abort();
    }
}

/// A request's place among the waiters, given up when the request stops waiting
/// (answered, failed, timed out, or its worker stopped), so that a late answer finds
/// nobody and is dropped.
struct Waiting<'a> {
    waiters: &'a Waiters,
    n: u64,
}

impl<'a> Waiting<'a> {
    fn new(waiters: &'a Waiters, n: u64, sender: oneshot::Sender<Message>) -> Self {
        lock(waiters).insert(n, sender);
        Waiting { waiters, n }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        lock(self.waiters).remove(&self.n);
    }
}

/// Hands every answer on `<inbox>.<n>` to request `n`, if it still waits. When the
/// subscription ends (the connection closed), every waiting request is told at once
/// rather than left to time out.
async fn dispatch(mut answers: Subscriber, prefix: String, waiters: Arc<Waiters>) {
    while let Some(message) = answers.next().await {
        let Some(n) = answer_number(&prefix, message.subject.as_str()) else {
            tracing::debug!(subject = %message.subject, "a message on the answers' inbox that answers no request");
            continue;
        };
        // Removed here, not by the request: the answer is delivered once.
        let sender = lock(&waiters).remove(&n);
        match sender {
            Some(sender) => {
                // The request may have stopped waiting since (its time is up).
                let _ = sender.send(message);
            }
            None => tracing::debug!(request = n, "an answer came for a request that no longer waits"),
        }
    }
    lock(&waiters).clear();
}

/// The request number an answer subject `<inbox>.<n>` ends with.
fn answer_number(prefix: &str, subject: &str) -> Option<u64> {
    subject.strip_prefix(prefix)?.parse().ok()
}

/// Connects, retrying while the server cannot be reached, as often as `--retries` allows.
async fn connect_client(
    url: &str,
    servers: Vec<ServerAddr>,
    options: &Options,
) -> Result<async_nats::Client, SetupError> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let connected = async_nats::ConnectOptions::new()
            .name("tensorplug infer")
            .connection_timeout(options.timeout.min(Duration::from_secs(10)))
            .event_callback(|event| async move {
                match event {
                    async_nats::Event::Disconnected => tracing::warn!("NATS disconnected: reconnecting"),
                    async_nats::Event::Connected => tracing::info!("NATS connected"),
                    // Draining, closing, slow consumers: details.
                    other => tracing::debug!("NATS: {other}"),
                }
            })
            .connect(servers.clone())
            .await;
        let error = match connected {
            Ok(client) => return Ok(client),
            Err(error) => error,
        };
        let reason = chain(&error);
        let retryable = !matches!(
            error.kind(),
            ConnectErrorKind::ServerParse
                | ConnectErrorKind::Authentication
                | ConnectErrorKind::AuthorizationViolation
                | ConnectErrorKind::Tls
        );
        if !retryable || attempt > options.retries {
            return Err(SetupError::Unreachable {
                url: url.to_owned(),
                reason,
            });
        }
        tracing::info!("connecting to NATS: {reason} (retrying)");
        setup_backoff(attempt).await;
    }
}

/// Checks that a stream keeps `subject`: without one, a publish has nowhere to go (and no
/// tensorplug server consumes it). Retried while JetStream does not answer.
async fn find_stream(context: &Context, url: &str, subject: &str, options: &Options) -> Result<String, SetupError> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let error = match context.stream_by_subject(subject).await {
            Ok(stream) => return Ok(stream),
            Err(error) => error,
        };
        let model_error = |reason: String| SetupError::Model {
            url: url.to_owned(),
            reason,
        };
        match error.kind() {
            GetStreamByNameErrorKind::NotFound => {
                return Err(model_error(format!(
                    "no JetStream stream keeps the subject {subject}: is a tensorplug server with \
                     --nats-url running (with the same --nats-subject-prefix)?"
                )))
            }
            GetStreamByNameErrorKind::InvalidSubject => {
                return Err(SetupError::Usage(format!("{subject:?} is not a NATS subject")))
            }
            GetStreamByNameErrorKind::JetStream(_) => {
                return Err(model_error(format!(
                    "looking up the stream of {subject}: {}",
                    chain(&error)
                )))
            }
            GetStreamByNameErrorKind::Request if attempt > options.retries => {
                return Err(SetupError::Unreachable {
                    url: url.to_owned(),
                    reason: format!(
                        "JetStream did not answer (is it enabled on the NATS server?): {}",
                        chain(&error)
                    ),
                })
            }
            GetStreamByNameErrorKind::Request => {
                tracing::info!("looking up the stream of {subject}: {} (retrying)", chain(&error));
            }
        }
        setup_backoff(attempt).await;
    }
}

/// The NATS servers `--url` names: `nats://host:port`, `tls://host:port` or `host:port`
/// (several, comma-separated, for a cluster).
fn server_addrs(url: &str) -> Result<Vec<ServerAddr>, SetupError> {
    let usage = |why: String| SetupError::Usage(format!("--url {url:?} with --transport nats: {why}"));
    let addrs = url
        .split(',')
        .map(|one| one.trim().trim_end_matches('/'))
        .filter(|one| !one.is_empty())
        .map(|one| {
            if let Some((scheme, _)) = one.split_once("://") {
                if scheme != "nats" && scheme != "tls" {
                    return Err(usage(format!(
                        "{scheme}:// is not a NATS address (nats://host:port, or host:port)"
                    )));
                }
            }
            ServerAddr::from_str(one).map_err(|e| usage(e.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if addrs.is_empty() {
        return Err(usage("no server named".into()));
    }
    Ok(addrs)
}

/// The subject requests for `model` (at `version`) are published on, if it is one a
/// message can be published on: tokens of printable ASCII without spaces, none empty and
/// none a wildcard.
fn publish_subject(prefix: &str, model: &str, version: Option<&str>) -> Result<String, SetupError> {
    let subject = wire::request_subject(prefix, model, version);
    let plain = subject.bytes().all(|b| b.is_ascii_graphic())
        && subject
            .split('.')
            .all(|token| !token.is_empty() && token != "*" && token != ">");
    if plain {
        Ok(subject)
    } else {
        Err(SetupError::Usage(format!(
            "the request subject {subject:?} (--nats-subject-prefix, the model and its version) \
             is not one to publish on: tokens of printable ASCII without spaces, none empty or a wildcard"
        )))
    }
}

/// The headers the transport sets itself, which `--request-headers` may not name.
const OWN_HEADERS: [&str; 3] = [headers::REPLY_TO, headers::MSG_ID, headers::JSON_HEADER_LENGTH];

/// `--request-headers` as NATS headers, checked (so that building a message cannot fail).
fn request_headers(parsed: &[(String, String)]) -> Result<Vec<(HeaderName, HeaderValue)>, SetupError> {
    parsed
        .iter()
        .map(|(name, value)| {
            if OWN_HEADERS.iter().any(|own| own.eq_ignore_ascii_case(name)) {
                return Err(SetupError::Usage(format!(
                    "--request-headers: {name} is set by the NATS transport itself"
                )));
            }
            let name = HeaderName::from_str(name)
                .map_err(|e| SetupError::Usage(format!("--request-headers: {name:?} is not a header name: {e}")))?;
            let value = HeaderValue::from_str(value)
                .map_err(|e| SetupError::Usage(format!("--request-headers: {value:?} is not a header value: {e}")))?;
            Ok((name, value))
        })
        .collect()
}

/// Request `n`'s headers: the user's, where to answer, its de-duplication id, and the
/// JSON part's length when binary tensor data follows it.
fn message_headers(
    user: &[(HeaderName, HeaderValue)],
    inbox: &str,
    msg_id_prefix: &str,
    n: u64,
    json_header_len: Option<usize>,
) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in user {
        map.append(name.clone(), value.clone());
    }
    map.insert(headers::REPLY_TO, format!("{inbox}.{n}"));
    map.insert(headers::MSG_ID, format!("{msg_id_prefix}-{n}"));
    if let Some(len) = json_header_len {
        map.insert(headers::JSON_HEADER_LENGTH, len.to_string());
    }
    map
}

/// What a failed publish means for the request.
#[derive(Debug, PartialEq, Eq)]
enum AfterPublishError {
    /// The acknowledgement did not come (or the connection broke): the message may be
    /// stored; publish it again under the same id.
    Republish,
    /// The request fails with `status`.
    Fail { status: u16, retryable: bool },
}

fn after_publish_error(kind: PublishErrorKind) -> AfterPublishError {
    match kind {
        PublishErrorKind::TimedOut | PublishErrorKind::BrokenPipe => AfterPublishError::Republish,
        // As REST answers a body over its limit: this request would never fit.
        PublishErrorKind::MaxPayloadExceeded => AfterPublishError::Fail {
            status: 413,
            retryable: false,
        },
        // The stream went away during the run: every other line would wait for it too.
        PublishErrorKind::StreamNotFound => AfterPublishError::Fail {
            status: 502,
            retryable: false,
        },
        PublishErrorKind::WrongLastMessageId
        | PublishErrorKind::WrongLastSequence
        | PublishErrorKind::MaxAckPending
        | PublishErrorKind::Other => AfterPublishError::Fail {
            status: 502,
            retryable: true,
        },
    }
}

/// An answer message read: its status from `Tensorplug-Status`, its body as REST's.
fn read_answer(map: Option<&HeaderMap>, body: &[u8], subject: &str) -> Result<Reply, Failure> {
    let header = |name: &str| map.and_then(|map| map.get(name)).map(HeaderValue::as_str);
    let status = header(headers::STATUS)
        .and_then(|status| status.trim().parse::<u16>().ok())
        .filter(|status| (100..=599).contains(status))
        .ok_or_else(|| {
            Failure::no_answer(
                format!(
                    "the answer on {subject} has no status (header {}: {:?})",
                    headers::STATUS,
                    header(headers::STATUS).unwrap_or_default()
                ),
                false,
            )
        })?;
    let json_header_len = header(headers::JSON_HEADER_LENGTH).and_then(|len| len.trim().parse().ok());
    rest_reply(status, body, json_header_len, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_nats_addresses_with_or_without_a_scheme() {
        let hosts = |url: &str| -> Vec<String> {
            server_addrs(url)
                .unwrap()
                .iter()
                .map(|a| format!("{}:{}", a.host(), a.port()))
                .collect()
        };
        assert_eq!(hosts("nats://127.0.0.1:4222"), ["127.0.0.1:4222"]);
        assert_eq!(hosts(" 127.0.0.1:5222/ "), ["127.0.0.1:5222"]);
        assert_eq!(hosts("broker"), ["broker:4222"]);
        assert_eq!(hosts("nats://a:1, b:2"), ["a:1", "b:2"]);
        for bad in ["http://localhost:8080", "", " , "] {
            match server_addrs(bad) {
                Err(SetupError::Usage(message)) => assert!(message.contains("--transport nats"), "{message}"),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn the_request_subject_is_checked() {
        assert_eq!(
            publish_subject("tensorplug.infer", "digits", None).unwrap(),
            "tensorplug.infer.digits"
        );
        assert_eq!(publish_subject("p", "a.b", Some("2")).unwrap(), "p.a.b.2");
        for (prefix, model) in [("p", "a b"), ("p.", "m"), ("p", "*"), ("p.>", "m"), ("", "m")] {
            assert!(
                matches!(publish_subject(prefix, model, None), Err(SetupError::Usage(_))),
                "{prefix:?} {model:?}"
            );
        }
    }

    #[test]
    fn headers_say_where_to_answer_and_carry_the_users_own() {
        let user = request_headers(&[("Authorization".into(), "Bearer x".into())]).unwrap();
        let map = message_headers(&user, "_INBOX.abc", "abc", 7, Some(42));
        let get = |name: &str| map.get(name).map(|v| v.as_str().to_owned());
        assert_eq!(get(headers::REPLY_TO).as_deref(), Some("_INBOX.abc.7"));
        assert_eq!(get(headers::MSG_ID).as_deref(), Some("abc-7"));
        assert_eq!(get(headers::JSON_HEADER_LENGTH).as_deref(), Some("42"));
        assert_eq!(get("Authorization").as_deref(), Some("Bearer x"));
        // Another attempt is another message: the stream must not drop it as a repeat.
        let again = message_headers(&user, "_INBOX.abc", "abc", 8, None);
        assert_eq!(again.get(headers::MSG_ID).map(|v| v.as_str()), Some("abc-8"));
        assert!(again.get(headers::JSON_HEADER_LENGTH).is_none());
    }

    #[test]
    fn request_headers_may_not_name_the_transports_own() {
        for name in ["Tensorplug-Reply-To", "nats-msg-id", "Inference-Header-Content-Length"] {
            assert!(
                matches!(request_headers(&[(name.into(), "x".into())]), Err(SetupError::Usage(_))),
                "{name}"
            );
        }
        assert!(request_headers(&[("bad:name".into(), "x".into())]).is_err());
    }

    #[test]
    fn answers_are_routed_by_their_subjects_last_token() {
        assert_eq!(answer_number("_INBOX.abc.", "_INBOX.abc.12"), Some(12));
        assert_eq!(answer_number("_INBOX.abc.", "_INBOX.abc.x"), None);
        assert_eq!(answer_number("_INBOX.abc.", "_INBOX.abc.1.2"), None);
        assert_eq!(answer_number("_INBOX.abc.", "_INBOX.other.1"), None);
    }

    #[test]
    fn a_lost_acknowledgement_is_published_again_and_a_too_large_request_is_not_retried() {
        assert_eq!(
            after_publish_error(PublishErrorKind::TimedOut),
            AfterPublishError::Republish
        );
        assert_eq!(
            after_publish_error(PublishErrorKind::MaxPayloadExceeded),
            AfterPublishError::Fail {
                status: 413,
                retryable: false
            }
        );
        assert_eq!(
            after_publish_error(PublishErrorKind::Other),
            AfterPublishError::Fail {
                status: 502,
                retryable: true
            }
        );
    }

    #[test]
    fn an_answer_is_read_as_rest_reads_it() {
        let mut map = HeaderMap::new();
        map.insert(headers::STATUS, "404");
        let failure = read_answer(Some(&map), br#"{"error":"no model m"}"#, "_INBOX.a.1").unwrap_err();
        assert_eq!(failure, Failure::answered(404, "no model m".into(), None));
        map.insert(headers::STATUS, "503");
        assert!(
            read_answer(Some(&map), br#"{"error":"busy"}"#, "_INBOX.a.1")
                .unwrap_err()
                .retryable
        );
        map.insert(headers::STATUS, "200");
        let body = br#"{"model_name":"m","model_version":"1","outputs":[
            {"name":"y","datatype":"FP32","shape":[1],"data":[0.5]}]}"#;
        assert!(matches!(
            read_answer(Some(&map), body, "_INBOX.a.1"),
            Ok(Reply::Success { .. })
        ));
        for status in [None, Some("two hundred"), Some("0")] {
            let mut map = HeaderMap::new();
            if let Some(status) = status {
                map.insert(headers::STATUS, status);
            }
            let failure = read_answer(Some(&map), body, "_INBOX.a.1").unwrap_err();
            assert_eq!((failure.status, failure.retryable), (502, false), "{status:?}");
            assert!(failure.message.contains("Tensorplug-Status"), "{}", failure.message);
        }
        assert!(read_answer(None, body, "_INBOX.a.1").is_err());
    }
}
