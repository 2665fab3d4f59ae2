//! The application around the library: the command line ([`config`]), starting and
//! stopping the server ([`server`], [`shutdown`]), logging ([`telemetry`]),
//! `tensorplug check` ([`check`]) and `tensorplug new` ([`new`]). The binary's `main`
//! only dispatches to these.

pub mod check;
pub mod config;
pub mod new;
pub mod server;
pub mod shutdown;
pub mod telemetry;
