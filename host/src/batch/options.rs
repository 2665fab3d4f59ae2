//! What `tensorplug infer` was asked to do: the command line's flags, checked by
//! `app::config` and read by every stage. A leaf: it names no other module of the job.

use std::path::PathBuf;
use std::time::Duration;

/// What `tensorplug infer` was asked to do (the command line's flags, checked).
#[derive(Clone, Debug)]
pub struct Options {
    pub model: String,
    pub model_version: Option<String>,
    /// The requests, one JSON object a line; `-` is standard input.
    pub input: PathBuf,
    /// Where the answers go, one a line; `-` is standard output.
    pub output: PathBuf,
    pub target: Target,
    /// Requests in flight at once.
    pub workers: usize,
    /// Retries of a line after its first attempt (connection errors, 503, 504).
    pub retries: u32,
    /// Most lines merged into one request.
    pub batch_size: usize,
    /// `Name: value` headers (gRPC: metadata) sent with every request.
    pub headers: Vec<String>,
    /// Longest wait for one request's answer.
    pub timeout: Duration,
    /// REST: send inputs and ask for outputs as binary tensor data.
    pub binary_data: bool,
    /// Write answers as they complete instead of in input order.
    pub unordered: bool,
    /// Skip the lines OUTPUT already answers successfully, and append the rest.
    pub resume: bool,
    /// Lines in the program at once (default: 4 × workers × batch size).
    pub window: Option<usize>,
    /// Longest input line; a longer one is answered as a failed line.
    pub max_line_bytes: usize,
    /// No progress display.
    pub quiet: bool,
    /// NATS: requests are published on `<prefix>.<model>[.<version>]` (the server's
    /// `--nats-subject-prefix`).
    pub nats_subject_prefix: String,
}

/// Where the requests go.
#[derive(Clone, Debug)]
pub enum Target {
    /// A server: `host:port` or a URL.
    Server { url: String, transport: TransportKind },
    /// The repository's model, run in this process.
    InProcess {
        repository: PathBuf,
        /// The compile cache (None: compile afresh).
        cache_dir: Option<PathBuf>,
    },
}

/// The wire a server is spoken to over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TransportKind {
    /// HTTP/1.1, JSON bodies (or binary tensor data with `--binary-data`).
    Rest,
    /// `inference.GRPCInferenceService/ModelInfer`, raw tensor contents.
    Grpc,
    /// NATS JetStream: REST bodies published to the stream a `tensorplug serve
    /// --nats-url` consumes, answers on this run's inbox.
    Nats,
}
