//! A real NATS server with JetStream for the queue edge's tests: Debian's `nats-server`
//! (installed by scripts/toolchains.sh) on a free loopback port, its store in a temporary
//! folder, stopped and restarted on the same port and store; and the clients' side:
//! publishing requests, and reading the answers a stream kept.

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer, stream};
use tokio_stream::StreamExt;

/// Largest message the tests' broker takes (the default, 1 MiB, is below the bodies the
/// hostile tests send; the server's own limit is what they test).
const MAX_PAYLOAD: &str = "8MB";

/// A running `nats-server -js`, killed on drop.
pub struct Broker {
    pub port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl Broker {
    pub fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let dir = tempfile::tempdir().expect("temp dir");
        let mut broker = Broker { port, dir, child: None };
        broker.restart();
        broker
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Kills the broker at once (SIGKILL: nothing flushed or said goodbye).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port and store (killing it first if it runs).
    pub fn restart(&mut self) {
        self.kill();
        let config = self.dir.path().join("nats.conf");
        std::fs::write(
            &config,
            format!(
                "listen: 127.0.0.1:{}\nmax_payload: {MAX_PAYLOAD}\njetstream {{ store_dir: \"{}\" }}\n",
                self.port,
                self.dir.path().join("store").display()
            ),
        )
        .expect("nats.conf");
        let child = Command::new(nats_server_binary())
            .arg("-c")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nats-server (installed by ./scripts/toolchains.sh broker)");
        self.child = Some(child);
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "nats-server did not listen"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// `nats-server` on the PATH, else where Debian's package puts it (/usr/sbin, which a
/// user's PATH may lack).
fn nats_server_binary() -> std::path::PathBuf {
    let on_path = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .unwrap_or_default();
    on_path
        .into_iter()
        .chain(["/usr/sbin".into(), "/usr/bin".into()])
        .map(|dir| dir.join("nats-server"))
        .find(|binary| binary.is_file())
        .unwrap_or_else(|| "nats-server".into())
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A client of `broker`, and its JetStream context.
pub async fn connect(broker: &Broker) -> (async_nats::Client, jetstream::Context) {
    let client = async_nats::ConnectOptions::new()
        .retry_on_initial_connect()
        .connect(broker.url())
        .await
        .expect("connect to nats");
    let context = jetstream::new(client.clone());
    (client, context)
}

/// Publishes through JetStream until the stream acknowledges (retrying while the broker
/// is away, as a producer that loses nothing must).
pub async fn publish(context: &jetstream::Context, subject: &str, headers: async_nats::HeaderMap, body: Vec<u8>) {
    let started = Instant::now();
    loop {
        let sent = match context
            .publish_with_headers(subject.to_owned(), headers.clone(), body.clone().into())
            .await
        {
            Ok(ack) => ack.await.map(drop).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match sent {
            Ok(()) => return,
            Err(error) => {
                assert!(
                    started.elapsed() < Duration::from_secs(60),
                    "publish kept failing: {error}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// An answer as a stream kept it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub body: Vec<u8>,
}

/// Reads the answers kept in the stream `TENSORPLUG_ANSWERS` on `subject` until every id
/// of `ids` has one (or `within` passes): every answer by request id, repeated ones too.
pub async fn answers(
    context: &jetstream::Context,
    subject: &str,
    ids: &[String],
    within: Duration,
) -> HashMap<String, Vec<Answer>> {
    let started = Instant::now();
    let stream = loop {
        match context.get_stream("TENSORPLUG_ANSWERS").await {
            Ok(stream) => break stream,
            Err(error) => {
                assert!(started.elapsed() < within, "no answer stream: {error}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let consumer: consumer::PullConsumer = stream
        .create_consumer(consumer::pull::Config {
            filter_subject: subject.to_owned(),
            deliver_policy: consumer::DeliverPolicy::All,
            ack_policy: consumer::AckPolicy::None,
            inactive_threshold: Duration::from_secs(60),
            ..Default::default()
        })
        .await
        .expect("a consumer of the answers");
    let mut messages = consumer
        .stream()
        .max_messages_per_batch(512)
        .heartbeat(Duration::from_secs(1))
        .expires(Duration::from_secs(3))
        .messages()
        .await
        .expect("answers");
    let mut found: HashMap<String, Vec<Answer>> = HashMap::new();
    let wanted: std::collections::HashSet<&String> = ids.iter().collect();
    while wanted.iter().any(|id| !found.contains_key(*id)) && started.elapsed() < within {
        let Ok(Some(Ok(message))) = tokio::time::timeout(Duration::from_secs(1), messages.next()).await else {
            continue;
        };
        let headers = message.headers.clone().unwrap_or_default();
        let header = |name: &str| headers.get(name).map(|v| v.as_str().to_owned());
        let id = header("Tensorplug-Request-Id").expect("an answer names its request");
        let status = header("Tensorplug-Status")
            .and_then(|s| s.parse().ok())
            .expect("status");
        found.entry(id).or_default().push(Answer {
            status,
            body: message.payload.to_vec(),
        });
    }
    found
}

/// What a fault test counted.
#[derive(Debug, Default)]
pub struct Tally {
    pub sent: usize,
    pub answered: usize,
    pub lost: usize,
    pub duplicated: usize,
}

/// Counts `answers` for `ids`: every id must have one, repeated ones must equal the first.
pub fn tally(ids: &[String], answers: &HashMap<String, Vec<Answer>>) -> Tally {
    let mut tally = Tally {
        sent: ids.len(),
        ..Default::default()
    };
    for id in ids {
        match answers.get(id) {
            None => tally.lost += 1,
            Some(all) => {
                tally.answered += 1;
                tally.duplicated += all.len() - 1;
                for repeated in &all[1..] {
                    assert_eq!(repeated, &all[0], "a repeated answer to {id} differs");
                }
            }
        }
    }
    tally
}

/// The consumer's state as the broker has it.
pub async fn consumer_info(context: &jetstream::Context) -> consumer::Info {
    let stream = context
        .get_stream("TENSORPLUG_INFER")
        .await
        .expect("the request stream");
    stream.consumer_info("tensorplug").await.expect("the shared consumer")
}

/// Messages left in the request stream once it empties, or after `within`: a replica
/// publishes an answer before it acknowledges or deletes the request, so a client can
/// hear the answer before the broker has removed the message.
pub async fn stream_messages_settled(context: &jetstream::Context, within: Duration) -> u64 {
    let deadline = std::time::Instant::now() + within;
    loop {
        let left = stream_messages(context).await;
        if left == 0 || std::time::Instant::now() >= deadline {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Messages still in the request stream.
pub async fn stream_messages(context: &jetstream::Context) -> u64 {
    let mut stream: stream::Stream = context
        .get_stream("TENSORPLUG_INFER")
        .await
        .expect("the request stream");
    stream.info().await.expect("stream info").state.messages
}
