//! The application around the library: the command line ([`config`]), starting and
//! stopping the server ([`server`], [`shutdown`]), logging ([`telemetry`]),
//! `tensorplug check` ([`check`]), `tensorplug compile` ([`compile`]) and `tensorplug new` ([`new`]). The binary's `main`
//! only dispatches to these.

pub mod check;
pub mod compile;
pub mod config;
pub mod new;
pub mod server;
pub mod shutdown;
pub mod telemetry;
