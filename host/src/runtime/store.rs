//! One store per stage instance, and every sandbox limit in one place.
//!
//! A store gets: caps on the whole instance's linear memory and table elements (all
//! memories and tables together), on its core instances, tables and memories, and on
//! its open resource handles; a deadline per call and one for
//! `init` (armed as an epoch deadline for wasm code and raced against a timer for host
//! calls, see [`super::deadline`]), WASI with no network, no environment, no arguments, a
//! closed stdin, the model's folder preopened read-only at `/model`, and stdout/stderr
//! captured into a bounded buffer. Nothing else of the host is reachable from a plugin.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use wasmtime::{Engine, Store};
use wasmtime_wasi::{FsPerms, ResourceTable, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::bindings::{log, metadata, metrics};
use super::memory::{StoreMemory, TABLE_ELEMENT_BYTES};
use super::output::CapturedOutput;
use super::plugin_metrics::Update;
use super::shared::{Declared, ModelShared};
use super::RuntimeError;

/// Where in the guest's filesystem the model folder appears.
pub const MODEL_DIR_GUEST_PATH: &str = "/model";

/// How much guest output is kept between two drains.
const CAPTURED_OUTPUT_BYTES: usize = 64 * 1024;

/// Who a stage instance is (the names that tag everything it logs), and the state it
/// shares with the other instances of its model version.
#[derive(Clone, Debug)]
pub struct StageTag {
    pub model: Arc<str>,
    pub version: Arc<str>,
    pub stage: &'static str,
    pub shared: Arc<ModelShared>,
}

/// The limits one stage instance runs under.
#[derive(Clone, Copy, Debug)]
pub struct SandboxLimits {
    /// Cap on the instance's linear memory, all memories together, in bytes; also the
    /// most data one call may pass back to the host (its host-call fuel).
    pub memory_bytes: usize,
    /// Cap on the elements of the instance's tables, all tables together.
    pub table_elements: usize,
    /// Cap on the resource handles (files, streams, pollables) the instance holds open.
    pub max_handles: usize,
    /// How long one call may take, host calls included.
    pub call_timeout: std::time::Duration,
    /// How long instantiating and `init` may take together.
    pub init_timeout: std::time::Duration,
    /// How long compiling the stage may take (at load, not a store's limit).
    pub compile_timeout: std::time::Duration,
}

/// Core instances, tables and memories one component may create: a plugin needs a
/// handful (its module, the WASI adapter's, the glue shims'); these only stop a
/// component built to create thousands.
const MAX_CORE_INSTANCES: usize = 64;
const MAX_TABLES: usize = 32;
const MAX_MEMORIES: usize = 8;

/// Log lines and bytes a plugin may write through the `log` interface per call; what
/// goes beyond is dropped and counted in one line after the call.
const LOG_LINES_PER_CALL: u32 = 200;
const LOG_BYTES_PER_CALL: usize = 256 * 1024;

/// The whole instance's resources, counted across all its memories and tables (wasmtime's
/// own `StoreLimits` caps each memory separately, so two memories would get twice the cap).
#[derive(Debug)]
struct InstanceLimits {
    memory_cap: usize,
    memory_used: usize,
    /// Whether a memory growth was refused at the cap since the last look.
    memory_refused: bool,
    table_cap: usize,
    table_used: usize,
    /// This store's part of what its model version is measured to hold.
    account: StoreMemory,
}

impl wasmtime::ResourceLimiter for InstanceLimits {
    fn memory_growing(&mut self, current: usize, desired: usize, _: Option<usize>) -> wasmtime::Result<bool> {
        let total = self.memory_used.saturating_sub(current).saturating_add(desired);
        if total > self.memory_cap {
            self.memory_refused = true;
            return Ok(false);
        }
        self.memory_used = total;
        self.account.resized(current, desired);
        Ok(true)
    }

    fn table_growing(&mut self, current: usize, desired: usize, _: Option<usize>) -> wasmtime::Result<bool> {
        let total = self.table_used.saturating_sub(current).saturating_add(desired);
        if total > self.table_cap {
            return Ok(false);
        }
        self.table_used = total;
        self.account
            .resized(current * TABLE_ELEMENT_BYTES, desired * TABLE_ELEMENT_BYTES);
        Ok(true)
    }

    fn instances(&self) -> usize {
        MAX_CORE_INSTANCES
    }

    fn tables(&self) -> usize {
        MAX_TABLES
    }

    fn memories(&self) -> usize {
        MAX_MEMORIES
    }
}

/// What the `log` interface let through during the current call.
#[derive(Debug, Default)]
struct LogBudget {
    lines: u32,
    bytes: usize,
    dropped: u64,
}

/// The host state of one store.
pub struct StoreState {
    wasi: WasiCtx,
    table: ResourceTable,
    limits: InstanceLimits,
    output: CapturedOutput,
    tag: StageTag,
    log_budget: LogBudget,
    /// Set once `init` has returned: metadata can be declared only before.
    initialised: bool,
    /// What this instance's `init` has declared so far; settled with the version's
    /// metadata once `init` succeeds.
    declared: Declared,
    /// When the current call (or instantiation and `init`) must end: `wasi:nn` compute
    /// runs natively, where epochs do not interrupt it, so it checks this.
    deadline: Instant,
    /// Epoch ticks the current call still has after its first epoch deadline, which then
    /// yields instead of trapping (a call on a runtime thread, see `stage::call`); `None`:
    /// the first deadline traps.
    epoch_after_yield: Option<u64>,
}

impl StoreState {
    /// The instance's linear memory, all memories together, in bytes.
    pub fn memory_bytes(&self) -> usize {
        self.limits.memory_used
    }

    /// Whether the instance asked for memory past its cap since the last call to this.
    pub fn take_memory_refused(&mut self) -> bool {
        std::mem::take(&mut self.limits.memory_refused)
    }

    /// Guest output written since the last call to this, as text.
    pub fn take_output(&self) -> String {
        self.output.drain()
    }

    pub fn tag(&self) -> &StageTag {
        &self.tag
    }

    /// Starts a call that must end at `deadline` (for `wasi:nn` compute): the instant
    /// the call's timer and epoch deadline are armed for.
    pub fn arm_deadline(&mut self, deadline: Instant) {
        self.deadline = deadline;
    }

    /// Makes the current call's first epoch deadline yield and then go on for `ticks`
    /// more (`Some`), or trap (`None`).
    pub(crate) fn yield_at_first_epoch_deadline(&mut self, ticks: Option<u64>) {
        self.epoch_after_yield = ticks;
    }

    /// When the current call's time is up.
    pub(crate) fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Whether the current call's time is up.
    pub(crate) fn deadline_passed(&self) -> bool {
        Instant::now() >= self.deadline
    }

    /// The instance's memory cap, in bytes: what a `wasi:nn` value may hold at most.
    pub(crate) fn memory_cap(&self) -> u64 {
        self.limits.memory_cap as u64
    }

    /// The handle table (WASI's and `wasi:nn`'s resources).
    pub(crate) fn table(&mut self) -> &mut ResourceTable {
        &mut self.table
    }

    /// Marks `init` as done, and settles what it declared: the first successful `init`
    /// of each stage of a version fixes its metadata; a later one (another instance, a
    /// replacement after a trap) that declares something else is logged and ignored, so
    /// clients never see metadata change while a version serves.
    pub fn finish_init(&mut self) {
        self.initialised = true;
        let declared = std::mem::take(&mut self.declared);
        let StageTag {
            model,
            version,
            stage,
            shared,
        } = &self.tag;
        if let Err(change) = shared.settle_metadata(stage, declared) {
            tracing::warn!(
                model = &**model,
                version = &**version,
                stage,
                "init declared other metadata than this version's first init ({}); kept the first: \
                 metadata is fixed per version",
                change.keys.join(", ")
            );
        }
    }

    /// Starts a call's log budget afresh; returns how many lines the last call had
    /// dropped.
    pub fn reset_log_budget(&mut self) -> u64 {
        std::mem::take(&mut self.log_budget).dropped
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
        let budget = &mut self.log_budget;
        if budget.lines >= LOG_LINES_PER_CALL || budget.bytes >= LOG_BYTES_PER_CALL {
            budget.dropped += 1;
            return;
        }
        budget.lines += 1;
        budget.bytes += message.len().min(MAX_LOG_MESSAGE_BYTES);
        let message = crate::model::text::cut_to_bytes(&message, MAX_LOG_MESSAGE_BYTES);
        let StageTag {
            model, version, stage, ..
        } = &self.tag;
        let (model, version) = (&**model, &**version);
        crate::traces::journal::log(level_name(level), message);
        match level {
            log::Level::Trace => tracing::trace!(model, version, stage, "{message}"),
            log::Level::Debug => tracing::debug!(model, version, stage, "{message}"),
            log::Level::Info => tracing::info!(model, version, stage, "{message}"),
            log::Level::Warn => tracing::warn!(model, version, stage, "{message}"),
            log::Level::Error => tracing::error!(model, version, stage, "{message}"),
        }
    }
}

impl metrics::Host for StoreState {
    fn counter_add(&mut self, name: String, labels: Vec<metrics::Label>, value: f64) -> Result<(), String> {
        self.update_metric(name, labels, Update::CounterAdd(value))
    }

    fn gauge_set(&mut self, name: String, labels: Vec<metrics::Label>, value: f64) -> Result<(), String> {
        self.update_metric(name, labels, Update::GaugeSet(value))
    }

    fn histogram_observe(&mut self, name: String, labels: Vec<metrics::Label>, value: f64) -> Result<(), String> {
        self.update_metric(name, labels, Update::HistogramObserve(value))
    }
}

impl StoreState {
    fn update_metric(&self, name: String, labels: Vec<metrics::Label>, update: Update) -> Result<(), String> {
        let labels = labels.into_iter().map(|l| (l.name, l.value)).collect();
        self.tag.shared.metrics.update(&name, labels, update)
    }
}

impl metadata::Host for StoreState {
    fn declare(&mut self, key: String, value: String) -> Result<(), String> {
        if self.initialised {
            return Err(format!(
                "metadata '{}' declared after init: metadata can only be declared during init",
                crate::model::text::clip(&key)
            ));
        }
        self.tag
            .shared
            .check_metadata(self.tag.stage, &mut self.declared, &key, value)
    }
}

fn level_name(level: log::Level) -> &'static str {
    match level {
        log::Level::Trace => "trace",
        log::Level::Debug => "debug",
        log::Level::Info => "info",
        log::Level::Warn => "warn",
        log::Level::Error => "error",
    }
}

/// Longest plugin log message kept; a plugin must not flood the host's log.
const MAX_LOG_MESSAGE_BYTES: usize = 8 * 1024;

/// Builds a fresh store for one stage instance.
pub fn new_store(
    engine: &Engine,
    model_dir: &Path,
    tag: StageTag,
    limits: SandboxLimits,
) -> Result<Store<StoreState>, RuntimeError> {
    let output = CapturedOutput::new(CAPTURED_OUTPUT_BYTES);
    let mut wasi = WasiCtxBuilder::new();
    // File operations on the read-only model folder run inline on the instance's own
    // thread instead of a blocking-pool round trip each (10x slower instance
    // replacement, measured): local files do not block indefinitely. Sleeps and polls
    // stay async, so the call's deadline still cuts them off.
    wasi.allow_blocking_current_thread(true)
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .stdout(output.clone())
        .stderr(output.clone());
    wasi.preopened_dir(model_dir, MODEL_DIR_GUEST_PATH, FsPerms::ReadOnly)
        .map_err(|e| RuntimeError::Sandbox(format!("cannot preopen {}: {e}", model_dir.display())))?;
    let mut table = ResourceTable::new();
    // A plugin that opens files (or streams, or pollables) without closing them gets an
    // error at the cap instead of taking the server's descriptors.
    table.set_max_capacity(limits.max_handles);
    let state = StoreState {
        wasi: wasi.build(),
        table,
        limits: InstanceLimits {
            memory_cap: limits.memory_bytes,
            memory_used: 0,
            memory_refused: false,
            table_cap: limits.table_elements,
            table_used: 0,
            account: StoreMemory::new(tag.shared.clone()),
        },
        output,
        tag,
        log_budget: LogBudget::default(),
        initialised: false,
        declared: Declared::new(),
        deadline: Instant::now() + limits.init_timeout,
        epoch_after_yield: None,
    };
    let mut store = Store::new(engine, state);
    store.limiter(|state| &mut state.limits);
    // What a call may pass to the host: its answer must fit in the instance's memory
    // anyway, so that is the bound (wasmtime's default is 128 MiB whatever the memory).
    store.set_hostcall_fuel(limits.memory_bytes.saturating_add(1 << 20));
    // Set once, not per call: what an epoch deadline does is read from the store's state.
    store.epoch_deadline_callback(|mut store| {
        Ok(match store.data_mut().epoch_after_yield.take() {
            Some(ticks) => wasmtime::UpdateDeadline::Yield(ticks),
            None => wasmtime::UpdateDeadline::Interrupt,
        })
    });
    store.set_epoch_deadline(super::deadline::deadline_ticks(limits.init_timeout));
    Ok(store)
}
