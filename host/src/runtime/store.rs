//! One store per stage instance, and every sandbox limit in one place.
//!
//! A store gets: a linear-memory cap (`StoreLimits`), an epoch deadline armed right before
//! each call, WASI with no network, no environment, no arguments, a closed stdin, the
//! model's folder preopened read-only at `/model`, and stdout/stderr captured into a
//! bounded buffer. Nothing else of the host is reachable from a plugin.

use std::path::Path;
use std::sync::Arc;

use wasmtime::{Engine, Store, StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::{FsPerms, ResourceTable, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::bindings::log;
use super::output::CapturedOutput;
use super::RuntimeError;

/// Where in the guest's filesystem the model folder appears.
pub const MODEL_DIR_GUEST_PATH: &str = "/model";

/// How much guest output is kept between two drains.
const CAPTURED_OUTPUT_BYTES: usize = 64 * 1024;

/// Names that tag everything a stage instance logs.
#[derive(Clone, Debug)]
pub struct StageTag {
    pub model: Arc<str>,
    pub version: Arc<str>,
    pub stage: &'static str,
}

/// The limits one stage instance runs under.
#[derive(Clone, Copy, Debug)]
pub struct SandboxLimits {
    /// Cap on the instance's linear memory, in bytes.
    pub memory_bytes: usize,
    /// Epoch ticks a single call may run (see [`super::EPOCH_TICK`]).
    pub deadline_ticks: u64,
}

/// The host state of one store.
pub struct StoreState {
    wasi: WasiCtx,
    table: ResourceTable,
    limits: StoreLimits,
    output: CapturedOutput,
    tag: StageTag,
}

impl StoreState {
    /// Guest output written since the last call to this, as text.
    pub fn take_output(&self) -> String {
        self.output.drain()
    }

    pub fn tag(&self) -> &StageTag {
        &self.tag
    }
}

impl WasiView for StoreState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl log::Host for StoreState {
    fn log(&mut self, level: log::Level, message: String) {
        let message = truncate_at_char(&message, MAX_LOG_MESSAGE_BYTES);
        let StageTag { model, version, stage } = &self.tag;
        let (model, version) = (&**model, &**version);
        match level {
            log::Level::Trace => tracing::trace!(model, version, stage, "{message}"),
            log::Level::Debug => tracing::debug!(model, version, stage, "{message}"),
            log::Level::Info => tracing::info!(model, version, stage, "{message}"),
            log::Level::Warn => tracing::warn!(model, version, stage, "{message}"),
            log::Level::Error => tracing::error!(model, version, stage, "{message}"),
        }
    }
}

/// Longest plugin log message kept; a plugin must not flood the host's log.
const MAX_LOG_MESSAGE_BYTES: usize = 8 * 1024;

/// `text` cut to at most `max` bytes on a character boundary.
fn truncate_at_char(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Builds a fresh store for one stage instance.
pub fn new_store(
    engine: &Engine,
    model_dir: &Path,
    tag: StageTag,
    limits: SandboxLimits,
) -> Result<Store<StoreState>, RuntimeError> {
    let output = CapturedOutput::new(CAPTURED_OUTPUT_BYTES);
    let mut wasi = WasiCtxBuilder::new();
    // Instances run on dedicated threads, never on the async runtime: blocking file
    // reads on them are fine and skip a block_on round trip per WASI call.
    wasi.allow_blocking_current_thread(true)
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .stdout(output.clone())
        .stderr(output.clone());
    wasi.preopened_dir(model_dir, MODEL_DIR_GUEST_PATH, FsPerms::ReadOnly)
        .map_err(|e| RuntimeError::Sandbox(format!("cannot preopen {}: {e}", model_dir.display())))?;
    let state = StoreState {
        wasi: wasi.build(),
        table: ResourceTable::new(),
        limits: StoreLimitsBuilder::new()
            .memory_size(limits.memory_bytes)
            .instances(64)
            .build(),
        output,
        tag,
    };
    let mut store = Store::new(engine, state);
    store.limiter(|state| &mut state.limits);
    store.set_epoch_deadline(limits.deadline_ticks);
    Ok(store)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_messages_are_cut_on_character_boundaries() {
        assert_eq!(truncate_at_char("héllo", 2), "h");
        assert_eq!(truncate_at_char("héllo", 3), "hé");
        assert_eq!(truncate_at_char("short", 100), "short");
    }
}
