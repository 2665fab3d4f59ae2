//! Logging through the host's structured log.
//!
//! Lines are tagged by the host with the model, version and stage. Outside WebAssembly
//! (native unit tests of plugin code) the lines go to stderr instead.

pub use crate::bindings::predictor::tensorplug::plugin::log::Level;

/// Logs `message` at `level`.
pub fn log(level: Level, message: &str) {
    #[cfg(target_arch = "wasm32")]
    crate::bindings::predictor::tensorplug::plugin::log::log(level, message);
    #[cfg(not(target_arch = "wasm32"))]
    eprintln!("[{level:?}] {message}");
}

/// Logs `message` at trace level.
pub fn trace(message: &str) {
    log(Level::Trace, message);
}

/// Logs `message` at debug level.
pub fn debug(message: &str) {
    log(Level::Debug, message);
}

/// Logs `message` at info level.
pub fn info(message: &str) {
    log(Level::Info, message);
}

/// Logs `message` at warn level.
pub fn warn(message: &str) {
    log(Level::Warn, message);
}

/// Logs `message` at error level.
pub fn error(message: &str) {
    log(Level::Error, message);
}
