//! The command line: every server setting, with its environment variable and default.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

pub use crate::api::repository::{ModelControl, RepositoryApi};
use crate::app::new::{NewLanguage, NewProject, NewStage};
use crate::app::telemetry::LogFormat;
pub use crate::batch::TransportKind;
use crate::nats::NatsSettings;
pub use crate::nats::Readiness;
pub use crate::serving::{ResidencyMode, ResidencyPolicy};
use crate::traces::{OtlpProtocol, SamplerKind, TraceSettings};

/// An inference server whose models are sandboxed WebAssembly plugins.
#[derive(Debug, Parser)]
#[command(name = "tensorplug", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve every model folder of a repository over the Open Inference Protocol.
    Serve(Box<ServeConfig>),
    /// Validate every model folder of a repository: parse each model.toml, compile every
    /// stage and run each stage's init. Exits non-zero when any model is broken.
    Check(CheckConfig),
    /// Batch inference: run every request of a JSONL file (one V2 request a line) through
    /// a model, against a server (--url) or in-process (--repository, the default), and
    /// write one answer line per input line.
    ///
    /// Exit status: 0 every line succeeded, 2 some lines failed (each has its answer line
    /// with its status and error), 1 usage or setup error (nothing was inferred), 130
    /// interrupted (rerun with --resume to answer the rest).
    Infer(Box<InferConfig>),
    /// Compile every stage of every model of a repository into the compile cache, ahead of
    /// time (a deploy or a container image bakes it), so that no load has to compile:
    /// `serve --cache-dir` with the same folder then reads them back in milliseconds.
    /// Exits non-zero when a stage does not compile.
    Compile(CompileConfig),
    /// Scaffold a plugin project in a new folder NAME: the stage's sources, a build.sh, a
    /// model folder (models/NAME) that serves once built, and a README with the commands.
    New(NewConfig),
}

/// Settings of `tensorplug new`.
#[derive(Clone, Debug, Args)]
pub struct NewConfig {
    /// The project's name: its folder, crate and model name (lowercase letters, digits,
    /// `-`, `_`; a letter first).
    pub name: String,

    /// The stage the plugin implements.
    #[arg(long, value_enum, default_value_t = NewStage::Predict)]
    pub stage: NewStage,

    /// The language it is written in.
    #[arg(long = "lang", value_enum, default_value_t = NewLanguage::Rust)]
    pub language: NewLanguage,

    /// Rust: the guest SDK crate to depend on; C and C++: the folder of the SDK header;
    /// Python: the folder of the `tensorplug` package; JavaScript: the folder of
    /// tensorplug.js (default: this tensorplug's own guest-sdk/ or sdk/<language>/).
    #[arg(long, env = "TENSORPLUG_SDK")]
    pub sdk: Option<PathBuf>,

    /// C, C++, Python and JavaScript: the WIT folder the bindings are generated from
    /// (default: this tensorplug's own wit/).
    #[arg(long, env = "TENSORPLUG_WIT")]
    pub wit: Option<PathBuf>,
}

impl NewConfig {
    /// The project these flags describe, made in the current folder.
    pub fn project(&self) -> NewProject {
        NewProject {
            sdk: self.sdk.clone(),
            wit: self.wit.clone(),
            ..NewProject::new(&self.name, self.stage, self.language, Path::new("."))
        }
    }
}

/// Settings of `tensorplug infer`. The flags `mlserver infer` has keep its names and
/// short forms, so that its users can switch by changing the program's name.
#[derive(Clone, Debug, Args)]
pub struct InferConfig {
    /// The model to run.
    #[arg(short = 'm', long = "model-name", env = "TENSORPLUG_INFER_MODEL_NAME")]
    pub model_name: String,

    /// The model version to run (default: the one served).
    #[arg(long, env = "TENSORPLUG_INFER_MODEL_VERSION")]
    pub model_version: Option<String>,

    /// The requests: one V2 inference request (JSON) a line; `-` reads standard input.
    #[arg(short = 'i', long = "input-data-path", env = "TENSORPLUG_INFER_INPUT_DATA_PATH")]
    pub input_data_path: PathBuf,

    /// Where the answers go, one a line; `-` writes standard output.
    #[arg(short = 'o', long = "output-data-path", env = "TENSORPLUG_INFER_OUTPUT_DATA_PATH")]
    pub output_data_path: PathBuf,

    /// The server: `host:port` (as mlserver infer takes it) or a URL (`http://...`;
    /// with --transport nats, the NATS server's `nats://host:port`). Without it, the
    /// model runs in this process, from --repository.
    #[arg(short = 'u', long, env = "TENSORPLUG_INFER_URL", conflicts_with = "repository")]
    pub url: Option<String>,

    /// In-process: the model repository to load the model from (default: ./models).
    #[arg(long)]
    pub repository: Option<PathBuf>,

    /// With --url: `rest` (HTTP/1.1, JSON or --binary-data), `grpc` or `nats` (NATS
    /// JetStream, to a server started with --nats-url; lines are sent one by one).
    #[arg(short = 't', long, env = "TENSORPLUG_INFER_TRANSPORT", value_enum, default_value_t = TransportKind::Rest)]
    pub transport: TransportKind,

    /// Requests in flight at once.
    #[arg(short = 'w', long, env = "TENSORPLUG_INFER_WORKERS", default_value_t = 10,
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub workers: u32,

    /// Retries of a line after its first attempt, for connection errors, 503 and 504
    /// (never for other answers).
    #[arg(short = 'r', long, env = "TENSORPLUG_INFER_RETRIES", default_value_t = 3,
          value_parser = clap::value_parser!(u32).range(0..=100))]
    pub retries: u32,

    /// Merge up to this many compatible lines into one multi-item request.
    #[arg(short = 's', long, env = "TENSORPLUG_INFER_BATCH_SIZE", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub batch_size: u32,

    /// A header sent with every request, `Name: value` (gRPC: metadata); repeatable.
    #[arg(
        short = 'H',
        long = "request-headers",
        env = "TENSORPLUG_INFER_REQUEST_HEADERS",
        value_delimiter = '\n'
    )]
    pub request_headers: Vec<String>,

    /// Longest wait for one request's answer, in seconds.
    #[arg(long, env = "TENSORPLUG_INFER_TIMEOUT", default_value_t = 60.0)]
    pub timeout: f64,

    /// REST: send inputs and receive outputs as binary tensor data (answer lines are
    /// JSON all the same).
    #[arg(short = 'b', long, env = "TENSORPLUG_INFER_BINARY_DATA")]
    pub binary_data: bool,

    /// Write answers as they complete, instead of in input order.
    #[arg(long)]
    pub unordered: bool,

    /// Skip the lines OUTPUT already answers successfully (by parameters.batch_index) and
    /// append the others' answers; failed answer lines in OUTPUT are replaced.
    #[arg(long)]
    pub resume: bool,

    /// Lines in the program at once, read but not yet written (memory is bounded by
    /// this); default 4 × workers × batch size.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub window: Option<u64>,

    /// Longest input line in bytes; a longer line is answered as a failed line.
    #[arg(long, default_value_t = 64 * 1024 * 1024,
          value_parser = clap::value_parser!(u64).range(1024..=(1u64 << 32)))]
    pub max_line_bytes: u64,

    /// No progress display (the summary line and errors are still printed).
    #[arg(short = 'q', long)]
    pub quiet: bool,

    /// With --transport nats: requests are published on `<prefix>.<model>` (or
    /// `<prefix>.<model>.<version>`); the server's --nats-subject-prefix.
    #[arg(
        long = "nats-subject-prefix",
        env = "TENSORPLUG_INFER_NATS_SUBJECT_PREFIX",
        default_value = "tensorplug.infer"
    )]
    pub nats_subject_prefix: String,

    /// More log lines on standard error: -v retries and failed lines, -vv details.
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count)]
    pub verbose: u8,

    #[command(flatten)]
    pub cache: CacheArgs,

    /// In-process: ONNX Runtime for the model's graphs that ask for it.
    #[command(flatten)]
    pub onnxruntime: OnnxRuntimeArgs,

    /// With an OTLP endpoint (flag or `OTEL_EXPORTER_OTLP_ENDPOINT`), the run is one trace:
    /// a span for it, and a client span for each request, whose context the request
    /// carries to the server.
    #[command(flatten)]
    pub tracing: TracingArgs,
}

impl InferConfig {
    /// The job these flags describe.
    pub fn options(&self) -> crate::batch::Options {
        let target = match &self.url {
            Some(url) => crate::batch::Target::Server {
                url: url.clone(),
                transport: self.transport,
            },
            None => crate::batch::Target::InProcess {
                repository: self.repository.clone().unwrap_or_else(|| PathBuf::from("models")),
                cache_dir: self.cache.usable_dir(),
            },
        };
        crate::batch::Options {
            model: self.model_name.clone(),
            model_version: self.model_version.clone(),
            input: self.input_data_path.clone(),
            output: self.output_data_path.clone(),
            target,
            workers: self.workers as usize,
            retries: self.retries,
            batch_size: self.batch_size as usize,
            headers: self.request_headers.clone(),
            timeout: Duration::try_from_secs_f64(self.timeout).unwrap_or(Duration::ZERO),
            binary_data: self.binary_data,
            unordered: self.unordered,
            resume: self.resume,
            window: self.window.map(|w| usize::try_from(w).unwrap_or(usize::MAX)),
            max_line_bytes: usize::try_from(self.max_line_bytes).unwrap_or(usize::MAX),
            quiet: self.quiet,
            nats_subject_prefix: self.nats_subject_prefix.clone(),
        }
    }

    /// The log filter -v/-vv ask for: warnings and errors by default, less the
    /// in-process model's per-item warnings (a trapped item, ...), which its answer line
    /// already carries.
    pub fn log_filter(&self) -> &'static str {
        match self.verbose {
            0 => "warn,tensorplug::pipeline=error,tensorplug::serving=error,tensorplug::runtime=error",
            1 => "warn,tensorplug=info",
            _ => "info,tensorplug=debug",
        }
    }
}

/// Settings of `tensorplug check`.
#[derive(Clone, Debug, Args)]
pub struct CheckConfig {
    /// The model repository to validate.
    #[arg(env = "TENSORPLUG_REPOSITORY", default_value = "models")]
    pub repository: PathBuf,

    #[command(flatten)]
    pub cache: CacheArgs,

    #[command(flatten)]
    pub onnxruntime: OnnxRuntimeArgs,
}

/// Settings of `tensorplug compile`.
#[derive(Clone, Debug, Args)]
pub struct CompileConfig {
    /// The model repository whose stages to compile.
    #[arg(env = "TENSORPLUG_REPOSITORY", default_value = "models")]
    pub repository: PathBuf,

    /// Folder of the compile cache to fill: the one `serve --cache-dir` reads (default:
    /// $XDG_CACHE_HOME/tensorplug or ~/.cache/tensorplug).
    #[arg(long, env = "TENSORPLUG_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
}

impl CompileConfig {
    /// The cache to fill, as `serve` resolves it.
    pub fn cache(&self) -> CacheArgs {
        CacheArgs {
            cache_dir: self.cache_dir.clone(),
            no_cache: false,
        }
    }
}

/// ONNX Runtime for the graphs that ask for it (`backend = "onnxruntime"` in `[graphs]`).
#[derive(Clone, Debug, Default, Args)]
pub struct OnnxRuntimeArgs {
    /// ONNX Runtime's shared library (e.g. the `onnxruntime` wheel's
    /// `onnxruntime/capi/libonnxruntime.so.1.32.0`); without it, models whose graphs ask
    /// for ONNX Runtime fail their load.
    #[arg(long = "onnxruntime-lib", env = "TENSORPLUG_ONNXRUNTIME_LIB")]
    pub onnxruntime_lib: Option<PathBuf>,
}

impl OnnxRuntimeArgs {
    /// Names the library for the process's graph loads.
    pub fn apply(&self) {
        if let Some(path) = &self.onnxruntime_lib {
            crate::runtime::nn::set_onnxruntime_library(path.clone());
        }
    }
}

/// Where compiled plugins are cached.
#[derive(Clone, Debug, Args)]
pub struct CacheArgs {
    /// Folder of the compile cache (default: $XDG_CACHE_HOME/tensorplug or
    /// ~/.cache/tensorplug).
    #[arg(long, env = "TENSORPLUG_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,

    /// Compile every plugin afresh instead of using the cache.
    #[arg(long, env = "TENSORPLUG_NO_CACHE")]
    pub no_cache: bool,
}

impl CacheArgs {
    /// The cache folder to use, if one is configured and can be written: it is created if
    /// missing and a file is written and removed in it. When it cannot be (a read-only
    /// root filesystem without a cache volume), the compile cache is off, with one
    /// warning: every load then compiles afresh, which is slower but serves the same.
    pub fn usable_dir(&self) -> Option<PathBuf> {
        let dir = self.resolved_dir()?;
        // wasmtime's cache wants an absolute path.
        let dir = std::path::absolute(&dir).unwrap_or(dir);
        let probe = dir.join(format!(".tensorplug-write-probe-{}", std::process::id()));
        let written = std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::write(&probe, b""))
            .and_then(|()| std::fs::remove_file(&probe));
        match written {
            Ok(()) => Some(dir),
            Err(error) => {
                tracing::warn!(
                    dir = %dir.display(),
                    %error,
                    "the compile cache is off: its folder cannot be written (mount a volume there, \
                     or set --cache-dir / TENSORPLUG_CACHE_DIR); every load compiles afresh"
                );
                None
            }
        }
    }

    /// The cache folder configured, if any (whether or not it can be written).
    pub fn resolved_dir(&self) -> Option<PathBuf> {
        if self.no_cache {
            return None;
        }
        self.cache_dir.clone().or_else(|| {
            let base = std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))?;
            Some(base.join("tensorplug"))
        })
    }
}

/// `--grpc-port`: the same grammar as `--http-port` (0 is any free port), plus `off`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GrpcPort {
    Off,
    Port(u16),
}

/// Why a `--grpc-port` value was refused.
#[derive(Debug, thiserror::Error)]
#[error("`{0}` is neither a port (0 to 65535; 0 picks a free one) nor `off`")]
pub struct GrpcPortError(String);

impl std::str::FromStr for GrpcPort {
    type Err = GrpcPortError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "off" => Ok(Self::Off),
            number => number.parse().map(Self::Port).map_err(|_| GrpcPortError(text.into())),
        }
    }
}

impl std::fmt::Display for GrpcPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Off => f.write_str("off"),
            Self::Port(port) => write!(f, "{port}"),
        }
    }
}

/// Settings of `tensorplug serve`.
#[derive(Clone, Debug, Args)]
pub struct ServeConfig {
    /// The model repository: a folder with one folder (holding a model.toml) per model.
    #[arg(env = "TENSORPLUG_REPOSITORY", default_value = "models")]
    pub repository: PathBuf,

    /// Address to listen on.
    #[arg(long, env = "TENSORPLUG_HOST", default_value = "0.0.0.0")]
    pub host: IpAddr,

    /// Port of the REST (HTTP/1.1) endpoint.
    #[arg(long, env = "TENSORPLUG_HTTP_PORT", default_value_t = 8080)]
    pub http_port: u16,

    /// Port of the gRPC endpoint (the same protocol, plus grpc.health.v1 and reflection):
    /// a number (0: any free port, logged once bound, as for --http-port) or `off`.
    #[arg(long, env = "TENSORPLUG_GRPC_PORT", default_value = "8081")]
    pub grpc_port: GrpcPort,

    /// Most calls open at once on one gRPC connection (advertised as HTTP/2's
    /// SETTINGS_MAX_CONCURRENT_STREAMS; a client beyond it waits, or is refused the stream).
    #[arg(long, env = "TENSORPLUG_GRPC_MAX_CONCURRENT_STREAMS", default_value_t = ServeConfig::DEFAULT_GRPC_MAX_CONCURRENT_STREAMS,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub grpc_max_concurrent_streams: u32,

    /// Largest accepted request body in bytes; larger requests get 413.
    #[arg(long, env = "TENSORPLUG_MAX_BODY_BYTES", default_value_t = 64 * 1024 * 1024,
          value_parser = clap::value_parser!(u64).range(1024..=(1u64 << 32)))]
    pub max_body_bytes: u64,

    /// Longest wait, on SIGINT/SIGTERM, for in-flight requests to finish.
    #[arg(long, env = "TENSORPLUG_SHUTDOWN_GRACE_SECS", default_value_t = 30)]
    pub shutdown_grace_secs: u64,

    /// On SIGINT/SIGTERM, how long to keep accepting connections and requests with
    /// readiness already off, before the drain: the time a load balancer or a Kubernetes
    /// Service needs to notice and route elsewhere (counted within the grace; 0: none).
    #[arg(long, env = "TENSORPLUG_SHUTDOWN_DELAY_MS", default_value_t = 0)]
    pub shutdown_delay_ms: u64,

    /// Log filter (tracing's EnvFilter syntax, e.g. `info,tensorplug=debug`).
    #[arg(long, env = "TENSORPLUG_LOG", default_value = "info")]
    pub log: String,

    /// Log line format: `text` (colours only on a terminal) or `json` (one object per line).
    #[arg(long, env = "TENSORPLUG_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// `on`: Prometheus metrics on `GET /metrics` (REST port), with latency histograms;
    /// `off`: no /metrics route and no histograms (the statistics endpoints still count).
    #[arg(long, env = "TENSORPLUG_METRICS", value_enum, default_value_t = Metrics::On)]
    pub metrics: Metrics,

    /// How the set of served models may change while running.
    #[arg(long, env = "TENSORPLUG_MODEL_CONTROL", value_enum, default_value_t = ModelControl::Poll)]
    pub model_control: ModelControl,

    /// With `--model-control explicit`: a model to load at start (repeatable).
    #[arg(long = "load-model", env = "TENSORPLUG_LOAD_MODELS", value_delimiter = ',')]
    pub load_models: Vec<String>,

    /// The repository API under /v2/repository: `on` serves the index, and load/unload
    /// only with `--admin-token`; `open` also allows load/unload without a token; `off`
    /// serves none of it.
    #[arg(long, env = "TENSORPLUG_REPOSITORY_API", value_enum, default_value_t = RepositoryApi::On)]
    pub repository_api: RepositoryApi,

    /// Bearer token that every repository route demands, and without which load and
    /// unload are refused (unless `--repository-api open`).
    #[arg(long, env = "TENSORPLUG_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,

    /// How long the repository must be quiet after a change before it is reloaded.
    #[arg(long, env = "TENSORPLUG_WATCH_DEBOUNCE_MS", default_value_t = 200)]
    pub watch_debounce_ms: u64,

    /// With `--model-control poll`: look at the repository's files every this many
    /// milliseconds instead of following file-system events (for a repository on NFS or
    /// another file system without inotify). 0: follow events, falling back to looking
    /// every 2 s if the kernel refuses to watch so many folders (its
    /// `fs.inotify.max_user_watches`).
    #[arg(long, env = "TENSORPLUG_WATCH_POLL_MS", default_value_t = 0)]
    pub watch_poll_ms: u64,

    /// Which models stay resident: `resident` loads every model at start and keeps it;
    /// `on-demand` indexes the repository at start (ready once indexed), loads each model
    /// on its first request, and sends idle and least recently used models back to
    /// standby. A model.toml's `[residency] pinned = true` keeps that model resident.
    #[arg(long, env = "TENSORPLUG_RESIDENCY", value_enum, default_value_t = ResidencyMode::Resident)]
    pub residency: ResidencyMode,

    /// With `--residency on-demand`: the memory resident models may hold together,
    /// measured (their instances' memories and tables, their share of compiled code,
    /// their graphs); the least recently used go back to standby to make room. No bound
    /// when not given.
    #[arg(long, env = "TENSORPLUG_MEMORY_BUDGET_MIB",
          value_parser = clap::value_parser!(u64).range(1..=1 << 30))]
    pub memory_budget_mib: Option<u64>,

    /// With `--residency on-demand`: a model used (or loaded) within this many seconds
    /// (or, if shorter, `--min-residency-loads` times its own load time) is not evicted
    /// to make room; a load waits for room instead (within its request's deadline, then 503).
    #[arg(long, env = "TENSORPLUG_MIN_RESIDENCY_SECS", default_value_t = 5)]
    pub min_residency_secs: u64,

    /// With `--residency on-demand`: a model that loads fast is protected from eviction
    /// for this many of its own load times after its last use, when that is shorter than
    /// `--min-residency-secs` (a reload costs it little). Higher: fewer reloads of models
    /// asked for again soon; lower: fewer loads waiting for room when the models in use
    /// do not fit the budget.
    #[arg(long, env = "TENSORPLUG_MIN_RESIDENCY_LOADS", default_value_t = 4,
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub min_residency_loads: u32,

    /// With `--residency on-demand`: a model idle this many seconds goes back to standby,
    /// its instances freed (0: never).
    #[arg(long, env = "TENSORPLUG_IDLE_UNLOAD_SECS", default_value_t = 300)]
    pub idle_unload_secs: u64,

    /// An instance above its model's `limits.min_instances` idle this many seconds is
    /// let go (instances are added, up to `limits.instances`, while requests wait for
    /// one). On demand a model's floor is 1 unless its `model.toml` says otherwise;
    /// resident, it is all of `instances`.
    #[arg(long, env = "TENSORPLUG_INSTANCE_IDLE_SECS", default_value_t = 30)]
    pub instance_idle_secs: u64,

    #[command(flatten)]
    pub cache: CacheArgs,

    #[command(flatten)]
    pub connections: ConnectionArgs,

    #[command(flatten)]
    pub onnxruntime: OnnxRuntimeArgs,

    #[command(flatten)]
    pub nats: NatsArgs,

    #[command(flatten)]
    pub tracing: TracingArgs,
}

impl ServeConfig {
    /// As many servers do (and what grpc-go's and Envoy's clients expect to meet).
    pub const DEFAULT_GRPC_MAX_CONCURRENT_STREAMS: u32 = 100;

    /// Settings for a server on `127.0.0.1:0` serving `repository`, as tests use it.
    pub fn for_repository(repository: impl Into<PathBuf>) -> Self {
        Self {
            repository: repository.into(),
            host: IpAddr::from([127, 0, 0, 1]),
            http_port: 0,
            // Tests that want gRPC hand `server::run_with_grpc` a bound listener.
            grpc_port: GrpcPort::Off,
            grpc_max_concurrent_streams: Self::DEFAULT_GRPC_MAX_CONCURRENT_STREAMS,
            max_body_bytes: 64 * 1024 * 1024,
            shutdown_grace_secs: 30,
            shutdown_delay_ms: 0,
            log: "info".into(),
            log_format: LogFormat::Text,
            metrics: Metrics::On,
            model_control: ModelControl::Poll,
            watch_poll_ms: 0,
            load_models: Vec::new(),
            repository_api: RepositoryApi::On,
            admin_token: None,
            watch_debounce_ms: 100,
            residency: ResidencyMode::Resident,
            memory_budget_mib: None,
            min_residency_secs: 5,
            min_residency_loads: 4,
            idle_unload_secs: 300,
            instance_idle_secs: 30,
            cache: CacheArgs {
                cache_dir: None,
                no_cache: true,
            },
            connections: ConnectionArgs::default(),
            onnxruntime: OnnxRuntimeArgs::default(),
            nats: NatsArgs::default(),
            tracing: TracingArgs::default(),
        }
    }

    /// How the repository keeps models resident; the residency settings only mean
    /// something on demand, so giving them otherwise is refused.
    pub fn residency_policy(&self) -> Result<ResidencyPolicy, String> {
        let on_demand = self.residency == ResidencyMode::OnDemand;
        if !on_demand && self.memory_budget_mib.is_some() {
            return Err("--memory-budget-mib needs --residency on-demand (resident models are never evicted)".into());
        }
        Ok(ResidencyPolicy {
            mode: self.residency,
            budget_bytes: self.memory_budget_mib.map(|mib| mib << 20),
            min_residency: Duration::from_secs(self.min_residency_secs),
            min_residency_loads: self.min_residency_loads,
            idle_unload: (on_demand && self.idle_unload_secs > 0).then(|| Duration::from_secs(self.idle_unload_secs)),
            instance_idle: Duration::from_secs(self.instance_idle_secs),
        })
    }

    pub fn shutdown_grace(&self) -> Duration {
        Duration::from_secs(self.shutdown_grace_secs)
    }

    /// The lame-duck time before the drain, within the grace.
    pub fn shutdown_delay(&self) -> Duration {
        Duration::from_millis(self.shutdown_delay_ms).min(self.shutdown_grace())
    }
}

/// The queue edge (off unless `--nats-url` is given): requests consumed from a NATS
/// JetStream stream, answers published back (docs/api.md, "NATS JetStream").
#[derive(Clone, Debug, PartialEq, Eq, Args)]
pub struct NatsArgs {
    /// The NATS server to consume inference requests from (`nats://host:port`; several,
    /// comma-separated, for a cluster). Off when not given.
    #[arg(long = "nats-url", env = "TENSORPLUG_NATS_URL")]
    pub url: Option<String>,

    /// The stream holding the requests (work-queue retention; created if missing).
    #[arg(
        long = "nats-stream",
        env = "TENSORPLUG_NATS_STREAM",
        default_value = "TENSORPLUG_INFER"
    )]
    pub stream: String,

    /// Requests go to `<prefix>.<model>` or `<prefix>.<model>.<version>`.
    #[arg(
        long = "nats-subject-prefix",
        env = "TENSORPLUG_NATS_SUBJECT_PREFIX",
        default_value = "tensorplug.infer"
    )]
    pub subject_prefix: String,

    /// Answers go to `<prefix>.<model>`, unless a request's `Tensorplug-Reply-To` header
    /// names its own subject.
    #[arg(
        long = "nats-answer-prefix",
        env = "TENSORPLUG_NATS_ANSWER_PREFIX",
        default_value = "tensorplug.answers"
    )]
    pub answer_prefix: String,

    /// The stream keeping answers (`<answer prefix>.>`; created if missing); empty: none is
    /// created.
    #[arg(
        long = "nats-answer-stream",
        env = "TENSORPLUG_NATS_ANSWER_STREAM",
        default_value = "TENSORPLUG_ANSWERS"
    )]
    pub answer_stream: String,

    /// How long the answer stream keeps an answer, in seconds (when the server creates it).
    #[arg(long = "nats-answer-max-age-secs", env = "TENSORPLUG_NATS_ANSWER_MAX_AGE_SECS", default_value_t = 3600,
          value_parser = clap::value_parser!(u64).range(1..=(365 * 24 * 3600)))]
    pub answer_max_age_secs: u64,

    /// The durable pull consumer every replica shares (work-queue: each message goes to one).
    #[arg(
        long = "nats-consumer",
        env = "TENSORPLUG_NATS_CONSUMER",
        default_value = "tensorplug"
    )]
    pub consumer: String,

    /// How long a delivered message may go unacknowledged before it is delivered again, to
    /// any replica (while it is worked on, the replica holding it extends this).
    #[arg(long = "nats-ack-wait-ms", env = "TENSORPLUG_NATS_ACK_WAIT_MS", default_value_t = 30_000,
          value_parser = clap::value_parser!(u64).range(100..=ConnectionArgs::MAX_TIMEOUT_MS))]
    pub ack_wait_ms: u64,

    /// Deliveries of one message before it is given up and answered with an error.
    #[arg(long = "nats-max-deliver", env = "TENSORPLUG_NATS_MAX_DELIVER", default_value_t = 5,
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub max_deliver: u32,

    /// Most messages this replica holds at once (pulled, not yet acknowledged); a pull
    /// asks for no more than the free ones.
    #[arg(long = "nats-pull-batch", env = "TENSORPLUG_NATS_PULL_BATCH", default_value_t = 64,
          value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub pull_batch: u32,

    /// How long a message handed back because its model's queue was full (503) waits
    /// before its next delivery, unless the server suggests another wait.
    #[arg(long = "nats-nak-delay-ms", env = "TENSORPLUG_NATS_NAK_DELAY_MS", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(0..=ConnectionArgs::MAX_TIMEOUT_MS))]
    pub nak_delay_ms: u64,

    /// `required`: the server is not ready while NATS is unreachable; `ignored`: readiness
    /// is the models' alone.
    #[arg(long = "nats-readiness", env = "TENSORPLUG_NATS_READINESS", value_enum, default_value_t = Readiness::Required)]
    pub readiness: Readiness,
}

impl Default for NatsArgs {
    /// The flags' defaults (the edge off).
    fn default() -> Self {
        Self {
            url: None,
            stream: "TENSORPLUG_INFER".into(),
            subject_prefix: "tensorplug.infer".into(),
            answer_prefix: "tensorplug.answers".into(),
            answer_stream: "TENSORPLUG_ANSWERS".into(),
            answer_max_age_secs: 3600,
            consumer: "tensorplug".into(),
            ack_wait_ms: 30_000,
            max_deliver: 5,
            pull_batch: 64,
            nak_delay_ms: 1000,
            readiness: Readiness::Required,
        }
    }
}

impl NatsArgs {
    /// The queue edge's settings, when it is on.
    pub fn settings(&self) -> Option<NatsSettings> {
        let url = self.url.clone()?;
        Some(NatsSettings {
            url,
            stream: self.stream.clone(),
            subject_prefix: self.subject_prefix.clone(),
            answer_prefix: self.answer_prefix.clone(),
            answer_stream: Some(self.answer_stream.clone()).filter(|s| !s.is_empty()),
            answer_max_age: Duration::from_secs(self.answer_max_age_secs),
            consumer: self.consumer.clone(),
            ack_wait: Duration::from_millis(self.ack_wait_ms),
            max_deliver: self.max_deliver,
            pull_batch: self.pull_batch as usize,
            nak_delay: Duration::from_millis(self.nak_delay_ms),
            readiness: self.readiness,
        })
    }
}

/// Whether the server keeps and serves metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Metrics {
    #[value(alias = "true")]
    On,
    #[value(alias = "false")]
    Off,
}

/// Bounds on the REST port's client connections (see `http::connections`).
///
/// Timeouts are in milliseconds, like `--watch-debounce-ms`, so that tests can use
/// sub-second ones; each must be at least 1 ms and at most a day.
#[derive(Clone, Debug, PartialEq, Eq, Args)]
pub struct ConnectionArgs {
    /// Longest time a client may take to send a request's headers, counted from the
    /// connection's accept (first request) or the request's first byte (later ones).
    #[arg(long, env = "TENSORPLUG_HEADER_READ_TIMEOUT_MS", default_value_t = ConnectionArgs::DEFAULT_HEADER_READ_TIMEOUT_MS,
          value_parser = clap::value_parser!(u64).range(1..=ConnectionArgs::MAX_TIMEOUT_MS))]
    pub header_read_timeout_ms: u64,

    /// Longest time a client may take to send a request's whole body, counted from the
    /// end of its headers; beyond it the request is answered 408 and the connection closed.
    #[arg(long, env = "TENSORPLUG_BODY_READ_TIMEOUT_MS", default_value_t = ConnectionArgs::DEFAULT_BODY_READ_TIMEOUT_MS,
          value_parser = clap::value_parser!(u64).range(1..=ConnectionArgs::MAX_TIMEOUT_MS))]
    pub body_read_timeout_ms: u64,

    /// Longest time a kept-alive connection may sit between requests (and a client may
    /// leave its response unread) before it is closed; a gRPC connection, with no I/O.
    #[arg(long, env = "TENSORPLUG_IDLE_TIMEOUT_MS", default_value_t = ConnectionArgs::DEFAULT_IDLE_TIMEOUT_MS,
          value_parser = clap::value_parser!(u64).range(1..=ConnectionArgs::MAX_TIMEOUT_MS))]
    pub idle_timeout_ms: u64,

    /// Most client connections open at once, REST and gRPC together (lowered at start if
    /// the descriptor limit cannot hold them plus a reserve); beyond it a connection is
    /// answered 503 (gRPC: closed) at once.
    #[arg(long, env = "TENSORPLUG_MAX_CONNECTIONS", default_value_t = ConnectionArgs::DEFAULT_MAX_CONNECTIONS,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,
}

impl ConnectionArgs {
    pub const DEFAULT_HEADER_READ_TIMEOUT_MS: u64 = 10_000;
    pub const DEFAULT_BODY_READ_TIMEOUT_MS: u64 = 60_000;
    pub const DEFAULT_IDLE_TIMEOUT_MS: u64 = 60_000;
    pub const DEFAULT_MAX_CONNECTIONS: u32 = 1024;
    /// Longest accepted timeout (a day): keeps deadline arithmetic far from overflow.
    pub const MAX_TIMEOUT_MS: u64 = 24 * 60 * 60 * 1000;

    /// The connection limits these flags ask for (the server may lower the cap to fit
    /// its descriptor limit).
    pub fn limits(&self) -> crate::http::connections::ConnectionLimits {
        crate::http::connections::ConnectionLimits {
            header_read_timeout: self.header_read_timeout(),
            body_read_timeout: self.body_read_timeout(),
            idle_timeout: self.idle_timeout(),
            max_connections: usize::try_from(self.max_connections).unwrap_or(usize::MAX),
        }
    }

    pub fn header_read_timeout(&self) -> Duration {
        Duration::from_millis(self.header_read_timeout_ms)
    }

    pub fn body_read_timeout(&self) -> Duration {
        Duration::from_millis(self.body_read_timeout_ms)
    }

    pub fn idle_timeout(&self) -> Duration {
        Duration::from_millis(self.idle_timeout_ms)
    }
}

impl Default for ConnectionArgs {
    /// The flags' defaults.
    fn default() -> Self {
        Self {
            header_read_timeout_ms: Self::DEFAULT_HEADER_READ_TIMEOUT_MS,
            body_read_timeout_ms: Self::DEFAULT_BODY_READ_TIMEOUT_MS,
            idle_timeout_ms: Self::DEFAULT_IDLE_TIMEOUT_MS,
            max_connections: Self::DEFAULT_MAX_CONNECTIONS,
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::{CacheArgs, Cli, Command, GrpcPort};

    fn grpc_port(args: &[&str]) -> Result<GrpcPort, clap::Error> {
        let cli = Cli::try_parse_from(["tensorplug", "serve", "models"].iter().chain(args))?;
        match cli.command {
            Command::Serve(config) => Ok(config.grpc_port),
            _ => unreachable!("parsed `serve`"),
        }
    }

    #[test]
    fn a_cache_folder_that_cannot_be_written_turns_the_cache_off() {
        let parent = tempfile::tempdir().unwrap();
        let writable = CacheArgs {
            cache_dir: Some(parent.path().join("made/on/demand")),
            no_cache: false,
        };
        assert_eq!(writable.usable_dir(), Some(parent.path().join("made/on/demand")));
        assert!(parent.path().join("made/on/demand").is_dir());
        assert_eq!(
            std::fs::read_dir(parent.path().join("made/on/demand")).unwrap().count(),
            0
        );
        // Below a file, as on a read-only root: no folder can be made (root included).
        let file = parent.path().join("a-file");
        std::fs::write(&file, b"").unwrap();
        let unwritable = CacheArgs {
            cache_dir: Some(file.join("cache")),
            no_cache: false,
        };
        assert_eq!(unwritable.usable_dir(), None);
        let off = CacheArgs {
            cache_dir: Some(parent.path().to_path_buf()),
            no_cache: true,
        };
        assert_eq!(off.usable_dir(), None);
    }

    #[test]
    fn a_grpc_port_is_a_number_zero_for_any_free_one_or_off() {
        assert_eq!(grpc_port(&["--grpc-port", "9001"]).unwrap(), GrpcPort::Port(9001));
        assert_eq!(grpc_port(&["--grpc-port", "0"]).unwrap(), GrpcPort::Port(0));
        assert_eq!(grpc_port(&["--grpc-port", "off"]).unwrap(), GrpcPort::Off);
    }

    #[test]
    fn grpc_is_on_at_8081_by_default() {
        // Unless the environment says otherwise (clap reads TENSORPLUG_GRPC_PORT).
        if std::env::var_os("TENSORPLUG_GRPC_PORT").is_none() {
            assert_eq!(grpc_port(&[]).unwrap(), GrpcPort::Port(8081));
        }
    }

    #[test]
    fn a_grpc_port_that_is_neither_a_port_nor_off_is_refused_by_name() {
        for junk in ["65536", "-1", "none", "", "8081x", "OFF "] {
            let error = grpc_port(&[&format!("--grpc-port={junk}")])
                .expect_err(junk)
                .to_string();
            assert!(error.contains("--grpc-port"), "{junk}: {error}");
            assert!(
                error.contains("is neither a port (0 to 65535; 0 picks a free one) nor `off`"),
                "{junk}: {error}"
            );
        }
    }

    #[test]
    fn a_grpc_port_prints_as_it_is_written() {
        for text in ["off", "0", "8081"] {
            assert_eq!(text.parse::<GrpcPort>().unwrap().to_string(), text);
        }
    }
}

/// Distributed tracing (off unless an OTLP endpoint is given). Each flag reads the
/// variable every OpenTelemetry SDK reads; `OTEL_RESOURCE_ATTRIBUTES` and the batch
/// processor's other `OTEL_BSP_*` variables are read as the SDK reads them.
#[derive(Clone, Debug, Args)]
pub struct TracingArgs {
    /// The OTLP collector's base URL (`/v1/traces` is added for HTTP), e.g.
    /// `http://localhost:4318`. Tracing is on once this or --otlp-traces-endpoint is set.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,

    /// The URL traces go to, used as it is (wins over --otlp-endpoint).
    #[arg(long, env = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")]
    pub otlp_traces_endpoint: Option<String>,

    /// `http/protobuf` (port 4318 by convention) or `grpc` (4317).
    #[arg(long, env = "OTEL_EXPORTER_OTLP_PROTOCOL", value_enum, default_value_t = OtlpProtocol::HttpProtobuf)]
    pub otlp_protocol: OtlpProtocol,

    /// Longest wait for one export, in milliseconds; a collector slower than this loses
    /// that batch of spans (counted), never a request.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_TIMEOUT", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub otlp_timeout_ms: u64,

    /// The `service.name` of the server's spans.
    #[arg(long, env = "OTEL_SERVICE_NAME", default_value = "tensorplug")]
    pub otel_service_name: String,

    /// Which requests are traced: a request whose client sent a sampled context is traced
    /// under the parent-based samplers whatever the ratio says.
    #[arg(long, env = "OTEL_TRACES_SAMPLER", value_enum, default_value_t = SamplerKind::ParentBasedTraceIdRatio)]
    pub trace_sampler: SamplerKind,

    /// The ratio of the `traceidratio` samplers, 0 to 1.
    #[arg(long, env = "OTEL_TRACES_SAMPLER_ARG", default_value_t = 1.0)]
    pub trace_sampler_arg: f64,

    /// Most spans waiting for export; past it, spans are dropped and counted
    /// (`tensorplug_trace_spans_total{outcome="dropped"}`), so a collector that is down
    /// or slow costs a bounded amount of memory.
    #[arg(long, env = "OTEL_BSP_MAX_QUEUE_SIZE", default_value_t = 2048,
          value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
    pub trace_queue_size: u64,

    /// Exemplars on `tensorplug_request_duration_seconds`: each bucket keeps the trace id
    /// of the latest sampled request in it (a dashboard's p99 links to the trace). Costs
    /// a lock per request.
    #[arg(long, env = "TENSORPLUG_TRACE_EXEMPLARS")]
    pub trace_exemplars: bool,
}

impl Default for TracingArgs {
    fn default() -> Self {
        Self {
            otlp_endpoint: None,
            otlp_traces_endpoint: None,
            otlp_protocol: OtlpProtocol::HttpProtobuf,
            otlp_timeout_ms: 10_000,
            otel_service_name: "tensorplug".into(),
            trace_sampler: SamplerKind::ParentBasedTraceIdRatio,
            trace_sampler_arg: 1.0,
            trace_queue_size: 2048,
            trace_exemplars: false,
        }
    }
}

impl TracingArgs {
    /// What tracing is to do.
    pub fn settings(&self) -> TraceSettings {
        TraceSettings {
            endpoint: self.otlp_endpoint.clone(),
            traces_endpoint: self.otlp_traces_endpoint.clone(),
            protocol: self.otlp_protocol,
            service_name: self.otel_service_name.clone(),
            sampler: self.trace_sampler,
            ratio: self.trace_sampler_arg,
            queue_size: self.trace_queue_size as usize,
            export_timeout: Duration::from_millis(self.otlp_timeout_ms),
            exemplars: self.trace_exemplars,
        }
    }
}
