//! `tensorplug-loadgen`: a small closed-loop load generator for benchmarking tensorplug
//! over loopback, speaking REST (HTTP/1.1), gRPC (HTTP/2) or NATS JetStream.
//!
//! `--concurrency N` clients each hold one keep-alive connection (TCP_NODELAY) and send
//! requests back to back: the next leaves as soon as the previous answer has been read in
//! full. Requests that start during `--warmup` are sent but not counted; then requests
//! start for `--duration`, and the ones in flight at the end are waited for and counted.
//!
//! REST (`--protocol rest`, the default; client.rs): with `--body-file`, every line of
//! the file (JSONL, e.g. one V2 inference request per line) is a request body, POSTed in
//! rotation (client `i` starts at line `i`); without it the requests are GETs. Bodies are
//! read and kept as `Bytes` once, before the run. A 2xx answer is a success.
//!
//! gRPC (`--protocol grpc` or `grpc-raw`; grpc.rs): the URL is the server's
//! (`http://127.0.0.1:8081`), `--model` names the model, and every line of `--body-file`
//! (a V2 JSON inference request) is converted once, before the run, into a
//! `ModelInferRequest` (convert.rs) with typed `contents` (`grpc`) or
//! `raw_input_contents` (`grpc-raw`), sent with `ModelInfer` in rotation. Each client has
//! its own channel (one HTTP/2 connection). A status other than OK is an error.
//!
//! NATS (`--protocol nats`; nats.rs): the URL is the broker's (`nats://127.0.0.1:4222`),
//! `--model` names the model, and every line of `--body-file` is a REST body, published
//! through JetStream on `<--nats-subject-prefix>.<model>` in rotation, each answered on the
//! load generator's own inbox. The clients share one connection. An answer whose
//! `Tensorplug-Status` is not 200 is an error.
//!
//! Latency is from just before a request is written (NATS: published) to the end of its answer, in
//! microseconds, for every request that got an answer. Any other answer, a transport
//! error or a time-out (`--timeout`) is an error, and the first error's text is reported.
//! Only loopback addresses are accepted as targets.
//!
//! Output: one line `concurrency=… requests=… rps=… p50=…us p90=… p99=… p999=… max=…
//! errors=…`, or with `--json` one JSON object with the same numbers (`p50_us`, …).

mod args;
mod client;
mod convert;
mod grpc;
mod nats;
mod report;
mod zipf;

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use bytes::Bytes;
use clap::Parser;
use hdrhistogram::Histogram;
use hyper::header::HeaderValue;
use hyper::Uri;
use tokio::time::Instant;

use args::{Args, Protocol};
use client::{Schedule, Target};
use convert::{Encoding, Model};
use report::{ClientStats, Summary};

/// Latencies are recorded from 1 µs up to this many µs (1 hour) at 3 significant digits.
const MAX_LATENCY_US: u64 = 3_600_000_000;
/// The longest warm-up plus duration accepted: load is always bounded in time.
const MAX_RUN: Duration = Duration::from_secs(3600);

/// What every client sends, by protocol.
enum Load {
    Rest(Arc<Target>),
    Grpc(Arc<grpc::Target>),
    Nats(Arc<nats::Target>),
}

fn main() -> ExitCode {
    match try_main(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tensorplug-loadgen: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Everything but the exit code: a run that completes prints its report and succeeds,
/// whatever errors it counted; only bad arguments or set-up failures are errors here.
fn try_main(args: Args) -> Result<()> {
    ensure!(
        args.warmup.checked_add(args.duration).is_some_and(|run| run <= MAX_RUN),
        "--warmup plus --duration must be at most {MAX_RUN:?}"
    );
    ensure!(!args.duration.is_zero(), "--duration must be more than zero");
    ensure!(!args.timeout.is_zero(), "--timeout must be more than zero");
    ensure!(
        args.rate.is_none() || args.protocol == Protocol::Rest,
        "--rate paces REST clients only"
    );

    let load = match args.protocol {
        Protocol::Rest => {
            let (addr, host, path) = resolve(&model_placeholder_kept(&args.url))?;
            Load::Rest(Arc::new(rest_target(&args, addr, host, path)?))
        }
        Protocol::Grpc | Protocol::GrpcRaw => {
            let (addr, _, path) = resolve(&args.url)?;
            let encoding = match args.protocol {
                Protocol::GrpcRaw => Encoding::Raw,
                _ => Encoding::Typed,
            };
            Load::Grpc(Arc::new(grpc_target(&args, addr, &path, encoding)?))
        }
        Protocol::Nats => Load::Nats(Arc::new(nats_target(&args)?)),
    };
    let histogram = Histogram::new_with_bounds(1, MAX_LATENCY_US, 3).context("creating the latency histogram")?;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads as usize)
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    let summary = runtime.block_on(run(&args, load, histogram))?;

    if args.json {
        println!("{}", summary.to_json());
    } else {
        println!("{summary}");
        // A warm-up error alone is worth showing only when nothing succeeded.
        let worth_showing = summary.stats_errors() > 0 || summary.requests() == 0;
        if let Some(error) = summary.first_error().filter(|_| worth_showing) {
            println!("first error: {error}");
        }
    }
    Ok(())
}

/// Starts every client, waits for all of them and merges what they counted.
async fn run(args: &Args, load: Load, histogram: Histogram<u64>) -> Result<Summary> {
    let clients = args.concurrency as usize;
    // NATS: the clients' shared connection is made before the clock starts (REST and gRPC
    // clients connect on their own, uncounted, within it).
    let nats = match &load {
        Load::Nats(target) => Some(nats::connect(target.clone(), clients, args.timeout).await?),
        Load::Rest(_) | Load::Grpc(_) => None,
    };
    let start = Instant::now();
    let schedule = Schedule {
        measure_from: start + args.warmup,
        end: start + args.warmup + args.duration,
        timeout: args.timeout,
        pace: args.rate.map(|rate| Duration::from_secs_f64(clients as f64 / rate)),
    };
    let (connection, tasks): (_, Vec<_>) = match (&load, nats) {
        (Load::Rest(target), _) => (
            None,
            (0..clients)
                .map(|i| tokio::spawn(client::run(i, target.clone(), schedule, histogram.clone())))
                .collect(),
        ),
        (Load::Grpc(target), _) => (
            None,
            (0..clients)
                .map(|i| tokio::spawn(grpc::run(i, target.clone(), schedule, histogram.clone())))
                .collect(),
        ),
        (Load::Nats(_), Some((connection, nats_clients))) => (
            Some(connection),
            nats_clients
                .into_iter()
                .map(|client| tokio::spawn(nats::run(client, schedule, histogram.clone())))
                .collect(),
        ),
        (Load::Nats(_), None) => bail!("the NATS clients were not connected"),
    };

    let mut total = ClientStats::new(histogram);
    for task in tasks {
        total.merge(task.await.context("a client task failed")?)?;
    }
    if let Some(connection) = connection {
        connection.close().await;
    }
    let elapsed = Instant::now().saturating_duration_since(schedule.measure_from);
    Ok(Summary {
        concurrency: args.concurrency,
        threads: args.threads,
        elapsed,
        stats: total,
    })
}

/// `{model}` in a URL, percent-encoded as it stays in the parsed path.
const MODEL_PLACEHOLDER: &str = "%7Bmodel%7D";

/// `url` with `{model}` (with --models) percent-encoded, so that it stays in the path
/// until each model's path is written.
fn model_placeholder_kept(url: &str) -> String {
    url.replace("{model}", MODEL_PLACEHOLDER)
}

/// REST: the bodies as they are (none: GETs).
fn rest_target(args: &Args, addr: SocketAddr, host: HeaderValue, path: Uri) -> Result<Target> {
    ensure!(
        args.model.is_none() && args.model_version.is_none(),
        "--model and --model-version are for --protocol grpc, grpc-raw or nats (REST names the model in the URL)"
    );
    let bodies = match &args.body_file {
        Some(file) => read_bodies(file)?,
        None => Vec::new(),
    };
    let content_type =
        HeaderValue::from_str(&args.content_type).context("--content-type is not a valid header value")?;
    let (paths, spread) = match args.models {
        None => (vec![path], None),
        Some(models) => {
            let template = path.to_string();
            ensure!(
                template.contains(MODEL_PLACEHOLDER),
                "with --models the URL names the model as {{model}} (e.g. http://127.0.0.1:8080/v2/models/{{model}}/infer)"
            );
            let paths = (args.first_model..args.first_model.saturating_add(models))
                .map(|k| {
                    let name = format!("{}{k}", args.model_prefix);
                    let path = template.replace(MODEL_PLACEHOLDER, &name);
                    path.parse::<Uri>()
                        .with_context(|| format!("'{path}' is not a request target"))
                })
                .collect::<Result<Vec<_>>>()?;
            ensure!(args.zipf.is_finite() && args.zipf >= 0.0, "--zipf must be a number ≥ 0");
            (paths, Some(zipf::Zipf::new(models as usize, args.zipf)))
        }
    };
    Ok(Target {
        addr,
        host,
        paths,
        spread,
        content_type,
        bodies,
    })
}

/// gRPC: the body file's requests converted for `--model`, for the server at `addr`.
fn grpc_target(args: &Args, addr: SocketAddr, path: &Uri, encoding: Encoding) -> Result<grpc::Target> {
    ensure!(
        path.path() == "/" && path.query().is_none(),
        "with --protocol grpc or grpc-raw the URL is the server's, without a path (e.g. http://127.0.0.1:8081), \
         not '{}'",
        args.url
    );
    let name = args
        .model
        .as_deref()
        .context("--model is required with --protocol grpc or grpc-raw")?;
    let file = args.body_file.as_deref().context(
        "--body-file (V2 JSON inference requests, one per line) is required with --protocol grpc or grpc-raw",
    )?;
    let text = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let model = Model {
        name,
        version: args.model_version.as_deref().unwrap_or(""),
    };
    let requests = convert::requests(&text, &model, encoding)
        .with_context(|| format!("converting {} to gRPC requests", file.display()))?;
    grpc::Target::new(addr, requests)
}

/// NATS: the broker at `nats://host:port` (loopback only), the subject of `--model`, and
/// the body file's lines as they are.
fn nats_target(args: &Args) -> Result<nats::Target> {
    let uri: Uri = args
        .url
        .parse()
        .with_context(|| format!("invalid URL '{}'", args.url))?;
    ensure!(
        uri.scheme_str() == Some("nats") && uri.path_and_query().is_none_or(|p| p.as_str() == "/"),
        "with --protocol nats the URL is the broker's, nats://HOST:PORT (e.g. nats://127.0.0.1:4222), not '{}'",
        args.url
    );
    let authority = uri
        .authority()
        .with_context(|| format!("URL '{}' has no host", args.url))?;
    let addr = loopback_addr(authority.host(), authority.port_u16().unwrap_or(4222))?;
    let model = args
        .model
        .as_deref()
        .context("--model is required with --protocol nats")?;
    let subject =
        tensorplug::protocol::nats::request_subject(&args.nats_subject_prefix, model, args.model_version.as_deref());
    tensorplug::protocol::nats::publishable(&subject).map_err(|_| {
        anyhow::anyhow!(
            "'{subject}' (--nats-subject-prefix, --model, --model-version) is not a NATS subject to publish on"
        )
    })?;
    let file = args
        .body_file
        .as_deref()
        .context("--body-file (V2 JSON inference requests, one per line) is required with --protocol nats")?;
    Ok(nats::Target {
        addr,
        subject,
        bodies: read_bodies(file)?,
    })
}

/// Splits an `http://host:port/path` URL into a loopback socket address, the `Host`
/// header and the origin-form request target.
fn resolve(url: &str) -> Result<(SocketAddr, HeaderValue, Uri)> {
    let uri: Uri = url.parse().with_context(|| format!("invalid URL '{url}'"))?;
    ensure!(
        uri.scheme_str() == Some("http"),
        "only http:// URLs are supported, not '{url}'"
    );
    let authority = uri.authority().with_context(|| format!("URL '{url}' has no host"))?;
    let addr = loopback_addr(authority.host(), authority.port_u16().unwrap_or(80))?;
    let host_header =
        HeaderValue::from_str(authority.as_str()).context("the URL's host is not a valid header value")?;
    let path = uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .parse()
        .context("invalid URL path")?;
    Ok((addr, host_header, path))
}

/// The address `host` resolves to (IPv4 first), which must be a loopback address.
fn loopback_addr(host: &str, port: u16) -> Result<SocketAddr> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .with_context(|| format!("resolving '{host}'"))?
        .collect();
    // Prefer IPv4: servers here usually listen on 127.0.0.1.
    let Some(addr) = addrs.iter().find(|a| a.is_ipv4()).or(addrs.first()).copied() else {
        bail!("'{host}' resolves to no address");
    };
    ensure!(
        addr.ip().is_loopback(),
        "refusing to send load to {addr}: only loopback targets (127.0.0.0/8, ::1) are allowed"
    );
    Ok(addr)
}

/// Reads the JSONL file: every non-blank line is one body.
fn read_bodies(file: &Path) -> Result<Vec<Bytes>> {
    let text = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let bodies: Vec<Bytes> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| Bytes::copy_from_slice(l.as_bytes()))
        .collect();
    ensure!(
        !bodies.is_empty(),
        "{} has no request body (no non-blank line)",
        file.display()
    );
    Ok(bodies)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn models_are_named_from_the_first_model_on() {
        let args = Args::parse_from([
            "tensorplug-loadgen",
            "http://127.0.0.1:8080/v2/models/{model}/infer",
            "--models",
            "3",
            "--first-model",
            "1",
        ]);
        let (addr, host, path) = resolve(&model_placeholder_kept(&args.url)).expect("loopback");
        let target = rest_target(&args, addr, host, path).expect("a target");
        let paths: Vec<String> = target.paths.iter().map(ToString::to_string).collect();
        assert_eq!(
            paths,
            ["/v2/models/m1/infer", "/v2/models/m2/infer", "/v2/models/m3/infer"]
        );
    }

    #[test]
    fn only_loopback_targets() {
        let (addr, host, path) = resolve("http://127.0.0.1:8080/v2/models/digits/infer").expect("loopback");
        assert_eq!(addr, "127.0.0.1:8080".parse().expect("addr"));
        assert_eq!(host, "127.0.0.1:8080");
        assert_eq!(path, "/v2/models/digits/infer");
        assert!(resolve("http://[::1]:9000/").is_ok());
        assert!(resolve("http://10.0.0.1:8080/").is_err());
        assert!(resolve("https://127.0.0.1/").is_err());
    }

    #[test]
    fn nats_targets_are_loopback_brokers() {
        let args = |url: &str| {
            Args::try_parse_from([
                "loadgen",
                url,
                "--protocol",
                "nats",
                "--model",
                "digits",
                "--body-file",
                "Cargo.toml",
            ])
            .expect("parses")
        };
        let target = nats_target(&args("nats://127.0.0.1:4333")).expect("loopback");
        assert_eq!(target.addr, "127.0.0.1:4333".parse().expect("addr"));
        assert_eq!(target.subject, "tensorplug.infer.digits");
        assert!(!target.bodies.is_empty());
        assert_eq!(
            nats_target(&args("nats://localhost"))
                .expect("default port")
                .addr
                .port(),
            4222
        );
        assert!(nats_target(&args("nats://10.0.0.1:4222")).is_err());
        assert!(nats_target(&args("http://127.0.0.1:4222")).is_err());
        assert!(nats_target(&args("nats://127.0.0.1:4222/x")).is_err());
    }
}
