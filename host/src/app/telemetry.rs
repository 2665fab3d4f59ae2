//! Logging setup: structured `tracing` output filtered by the `--log` setting, as text
//! (colours only on a terminal) or as one JSON object per line for log collectors.

use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines; colours only when writing to a terminal.
    #[default]
    Text,
    /// One JSON object per line (`timestamp`, `level`, `fields`, `span`, ...).
    Json,
}

/// Installs the global subscriber; a second call (as in tests) is a no-op.
pub fn init(filter: &str, format: LogFormat) {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_target(false);
    let _ = match format {
        // Colour codes only for a terminal: in files and pipes they garble the fields.
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
            .try_init(),
        LogFormat::Json => builder.json().with_current_span(true).try_init(),
    };
}

/// Installs the global subscriber writing text lines to standard error (for commands
/// whose standard output is data, like `infer -o -`); a second call is a no-op.
pub fn init_stderr(filter: &str) {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}
