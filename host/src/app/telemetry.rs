//! Logging setup: structured `tracing` output filtered by the `--log` setting.

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber; a second call (as in tests) is a no-op.
pub fn init(filter: &str) {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        // Colour codes only for a terminal: in files and pipes they garble the fields.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .try_init();
}
