//! The command line: every server setting, with its environment variable and default.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

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
}

impl ServeConfig {
    /// Settings for a server on `127.0.0.1:0` serving `repository`, as tests use it.
    pub fn for_repository(repository: impl Into<PathBuf>) -> Self {
        Self {
            repository: repository.into(),
            host: IpAddr::from([127, 0, 0, 1]),
            http_port: 0,
            max_body_bytes: 64 * 1024 * 1024,
            shutdown_grace_secs: 30,
            log: "info".into(),
        }
    }

    pub fn shutdown_grace(&self) -> Duration {
        Duration::from_secs(self.shutdown_grace_secs)
    }
}
