//! The server's limits under attack: hostile request bodies and echoes, and hostile
//! connections (slow, idle, too many). These measure time and memory, so they run one at
//! a time (see [`ONE_AT_A_TIME`]) in a binary of their own.

#[path = "../common/mod.rs"]
mod common;

mod answers;
mod cold_storm;
mod connections;
mod grpc_connections;
mod grpc_edge;
mod hostile;
mod metrics_scrapes;
mod nn;
mod sizing;

/// Each test here runs a server and pushes it to a limit; measured one at a time, its
/// timings and memory peaks are the server's own, not its neighbours'.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
