//! The command line.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};

/// Closed-loop load generator for tensorplug: REST over HTTP/1.1, gRPC `ModelInfer` over
/// HTTP/2, or NATS JetStream (loopback targets only).
#[derive(Parser, Debug)]
#[command(version, about)]
pub struct Args {
    /// REST: the URL to load, e.g. http://127.0.0.1:8080/v2/models/digits/infer.
    /// gRPC: the server, e.g. http://127.0.0.1:8081.
    /// NATS: the broker, e.g. nats://127.0.0.1:4222
    pub url: String,

    /// rest: the bodies as they are, over HTTP/1.1; grpc: ModelInfer with typed contents;
    /// grpc-raw: ModelInfer with raw_input_contents (both over HTTP/2); nats: the bodies as
    /// they are, published through JetStream, answered on the load generator's inbox.
    #[arg(long, value_enum, default_value_t = Protocol::Rest)]
    pub protocol: Protocol,

    /// gRPC and NATS: the model to infer with (required with grpc, grpc-raw and nats).
    #[arg(long)]
    pub model: Option<String>,

    /// gRPC and NATS: the model's version (default: the one the server serves).
    #[arg(long)]
    pub model_version: Option<String>,

    /// NATS: requests are published on `<prefix>.<model>[.<version>]` (the server's
    /// --nats-subject-prefix).
    #[arg(long, default_value = "tensorplug.infer")]
    pub nats_subject_prefix: String,

    /// Simulated clients, each with one keep-alive connection (NATS: all on one connection).
    #[arg(short, long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub concurrency: u32,

    /// How long to measure (e.g. 10s, 500ms, 1m).
    #[arg(short, long, default_value = "10s", value_parser = parse_duration)]
    pub duration: Duration,

    /// How long to send before measuring (not counted).
    #[arg(short, long, default_value = "2s", value_parser = parse_duration)]
    pub warmup: Duration,

    /// JSONL file: one request body per line, sent in rotation (REST: POST; without it,
    /// GET). gRPC: V2 JSON inference requests, converted to ModelInferRequests before the
    /// run (required). NATS: the bodies as they are, published in rotation (required).
    #[arg(short, long, value_name = "FILE")]
    pub body_file: Option<PathBuf>,

    /// REST: Content-Type of the bodies.
    #[arg(long, default_value = "application/json")]
    pub content_type: String,

    /// A request without a complete answer after this long is an error.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub timeout: Duration,

    /// Worker threads of the load generator's runtime (the server needs the other cores).
    #[arg(short, long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub threads: u32,

    /// REST: spread requests over this many models: `{model}` in the URL is replaced by
    /// a model name, `m0` to `m<N-1>` (with --model-prefix and --first-model), drawn by a
    /// Zipf law (--zipf).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub models: Option<u32>,

    /// With --models: the names' prefix (`m` gives m0, m1, ...).
    #[arg(long, default_value = "m")]
    pub model_prefix: String,

    /// With --models: the number of the first model (1 gives m1 to m<N>: traffic that
    /// leaves m0 to another client).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
    pub first_model: u32,

    /// With --models: the Zipf exponent (model k is picked in proportion to
    /// 1/(k+1)^S; 0 is uniform).
    #[arg(long, default_value_t = 1.0)]
    pub zipf: f64,

    /// REST: the requests per second all clients together send at most; each client
    /// waits its share of the interval before its next request (a paced closed loop, for
    /// background traffic of a known rate). Unbounded when not given.
    #[arg(long, value_parser = parse_rate)]
    pub rate: Option<f64>,

    /// Print one JSON object instead of the human line.
    #[arg(long)]
    pub json: bool,
}

/// What goes on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Protocol {
    /// V2 REST over HTTP/1.1.
    Rest,
    /// gRPC ModelInfer, tensor data in the typed `contents` fields.
    Grpc,
    /// gRPC ModelInfer, tensor data in `raw_input_contents`.
    GrpcRaw,
    /// NATS JetStream: V2 REST bodies published to tensorplug's request stream.
    Nats,
}

fn parse_rate(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(rate) if rate.is_finite() && rate > 0.0 => Ok(rate),
        _ => Err(format!("{text:?} is not a positive number of requests per second")),
    }
}

/// `10s`, `1.5s`, `500ms`, `250us`, `2m`; a bare number is seconds.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let invalid = || format!("invalid duration '{text}' (examples: 10s, 500ms, 2m)");
    let value: f64 = number.parse().map_err(|_| invalid())?;
    let seconds = match unit {
        "" | "s" => value,
        "ms" => value / 1e3,
        "us" => value / 1e6,
        "m" | "min" => value * 60.0,
        _ => return Err(invalid()),
    };
    Duration::try_from_secs_f64(seconds).map_err(|_| invalid())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates() {
        assert_eq!(parse_rate("250"), Ok(250.0));
        assert_eq!(parse_rate("0.5"), Ok(0.5));
        for bad in ["0", "-3", "inf", "NaN", "fast", ""] {
            assert!(parse_rate(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("5h").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn protocols() {
        let args = Args::try_parse_from([
            "loadgen",
            "http://127.0.0.1:1",
            "--protocol",
            "grpc-raw",
            "--model",
            "m",
        ])
        .expect("parses");
        assert_eq!(args.protocol, Protocol::GrpcRaw);
        assert_eq!(args.model.as_deref(), Some("m"));
        let default = Args::try_parse_from(["loadgen", "http://127.0.0.1:1/"]).expect("parses");
        assert_eq!(default.protocol, Protocol::Rest);
        assert!(Args::try_parse_from(["loadgen", "http://127.0.0.1:1/", "--protocol", "soap"]).is_err());
        let nats = Args::try_parse_from(["loadgen", "nats://127.0.0.1:1", "--protocol", "nats", "--model", "m"])
            .expect("parses");
        assert_eq!(nats.protocol, Protocol::Nats);
        assert_eq!(nats.nats_subject_prefix, "tensorplug.infer");
    }
}
