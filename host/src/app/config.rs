//! The command line: every server setting, with its environment variable and default.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

pub use crate::api::repository::{ModelControl, RepositoryApi};
use crate::app::telemetry::LogFormat;

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
    Serve(ServeConfig),
    /// Validate every model folder of a repository: parse each model.toml, compile every
    /// stage and run each stage's init. Exits non-zero when any model is broken.
    Check(CheckConfig),
}

/// Settings of `tensorplug check`.
#[derive(Clone, Debug, Args)]
pub struct CheckConfig {
    /// The model repository to validate.
    #[arg(env = "TENSORPLUG_REPOSITORY", default_value = "models")]
    pub repository: PathBuf,

    #[command(flatten)]
    pub cache: CacheArgs,
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
    /// The cache folder to use, if any.
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

    /// Port of the gRPC endpoint (the same protocol, plus grpc.health.v1 and reflection);
    /// 0 switches gRPC off.
    #[arg(long, env = "TENSORPLUG_GRPC_PORT", default_value_t = 8081)]
    pub grpc_port: u16,

    /// Largest accepted request body in bytes; larger requests get 413.
    #[arg(long, env = "TENSORPLUG_MAX_BODY_BYTES", default_value_t = 64 * 1024 * 1024,
          value_parser = clap::value_parser!(u64).range(1024..=(1u64 << 32)))]
    pub max_body_bytes: u64,

    /// Longest wait, on SIGINT/SIGTERM, for in-flight requests to finish.
    #[arg(long, env = "TENSORPLUG_SHUTDOWN_GRACE_SECS", default_value_t = 30)]
    pub shutdown_grace_secs: u64,

    /// Log filter (tracing's EnvFilter syntax, e.g. `info,tensorplug=debug`).
    #[arg(long, env = "TENSORPLUG_LOG", default_value = "info")]
    pub log: String,

    /// Log line format: `text` (colours only on a terminal) or `json` (one object per line).
    #[arg(long, env = "TENSORPLUG_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

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

    #[command(flatten)]
    pub cache: CacheArgs,

    #[command(flatten)]
    pub connections: ConnectionArgs,
}

impl ServeConfig {
    /// Settings for a server on `127.0.0.1:0` serving `repository`, as tests use it.
    pub fn for_repository(repository: impl Into<PathBuf>) -> Self {
        Self {
            repository: repository.into(),
            host: IpAddr::from([127, 0, 0, 1]),
            http_port: 0,
            // Off: tests that want gRPC hand `server::run_with_grpc` a bound listener.
            grpc_port: 0,
            max_body_bytes: 64 * 1024 * 1024,
            shutdown_grace_secs: 30,
            log: "info".into(),
            log_format: LogFormat::Text,
            model_control: ModelControl::Poll,
            load_models: Vec::new(),
            repository_api: RepositoryApi::On,
            admin_token: None,
            watch_debounce_ms: 100,
            cache: CacheArgs {
                cache_dir: None,
                no_cache: true,
            },
            connections: ConnectionArgs::default(),
        }
    }

    pub fn shutdown_grace(&self) -> Duration {
        Duration::from_secs(self.shutdown_grace_secs)
    }
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
    /// leave its response unread) before it is closed.
    #[arg(long, env = "TENSORPLUG_IDLE_TIMEOUT_MS", default_value_t = ConnectionArgs::DEFAULT_IDLE_TIMEOUT_MS,
          value_parser = clap::value_parser!(u64).range(1..=ConnectionArgs::MAX_TIMEOUT_MS))]
    pub idle_timeout_ms: u64,

    /// Most client connections open at once (lowered at start if the descriptor limit
    /// cannot hold them plus a reserve); beyond it a connection is answered 503 and closed.
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
    pub fn limits(&self) -> crate::http::connections::Limits {
        crate::http::connections::Limits {
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
