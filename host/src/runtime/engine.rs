//! The wasmtime engine shared by every model, its linker, and the epoch ticker that
//! enforces per-call time limits.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;

use std::path::Path;
use wasmtime::component::{HasSelf, Linker};

use wasmtime::{Cache, CacheConfig, Config, Engine, WasmBacktraceDetails};

use super::bindings::{log, metadata, metrics, nn};
use super::components::Components;
use super::deadline::EPOCH_TICK;
use super::plugin_metrics::{PluginMetrics, PluginPage};
use super::precompiled::Precompiled;
use super::store::StoreState;
use super::RuntimeError;

/// The engine, the linker every stage is instantiated through, and the ticker.
///
/// Cheap to clone; the ticker thread stops when the last clone is dropped.
#[derive(Clone)]
pub struct Runtime {
    engine: Engine,
    linker: Arc<Linker<StoreState>>,
    _ticker: Arc<Ticker>,
    /// The engine's compile cache, kept for its hit and miss counters.
    cache: Option<Cache>,
    /// What every model's plugin metrics may put on `/metrics`, shared by the models.
    plugin_page: Arc<PluginPage>,
    /// The compiled components loaded stages hold, by their bytes.
    components: Arc<Components>,
    /// Stages compiled ahead of time into the cache folder, mapped by loads.
    precompiled: Option<Precompiled>,
}

impl Runtime {
    /// Builds the engine (epoch interruption on, backtraces with function names but
    /// without DWARF line lookup, which costs milliseconds per trap). With `cache_dir`,
    /// compiled code is kept on disk there, so a restart or a reload of an unchanged
    /// stage costs milliseconds instead of a recompile.
    pub fn new(cache_dir: Option<&Path>) -> Result<Self, RuntimeError> {
        let mut config = Config::new();
        let mut compile_cache = None;
        if let Some(dir) = cache_dir {
            let mut cache_config = CacheConfig::new();
            cache_config.with_directory(dir);
            let cache = Cache::new(cache_config)
                .map_err(|e| RuntimeError::Engine(format!("compile cache in {}: {e:#}", dir.display())))?;
            compile_cache = Some(cache.clone());
            config.cache(Some(cache));
        }
        config
            .epoch_interruption(true)
            .wasm_backtrace_details(WasmBacktraceDetails::Disable)
            .cranelift_opt_level(wasmtime::OptLevel::Speed);
        let engine = Engine::new(&config).map_err(|e| RuntimeError::Engine(format!("{e:#}")))?;

        let mut linker = Linker::<StoreState>::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)
            .map_err(|e| RuntimeError::Engine(format!("linking WASI: {e:#}")))?;
        super::wasi_files::refuse_special_files(&mut linker)
            .map_err(|e| RuntimeError::Engine(format!("linking WASI's checked open-at: {e:#}")))?;
        log::add_to_linker::<_, HasSelf<StoreState>>(&mut linker, |state| state)
            .map_err(|e| RuntimeError::Engine(format!("linking log: {e:#}")))?;
        metrics::add_to_linker::<_, HasSelf<StoreState>>(&mut linker, |state| state)
            .map_err(|e| RuntimeError::Engine(format!("linking metrics: {e:#}")))?;
        metadata::add_to_linker::<_, HasSelf<StoreState>>(&mut linker, |state| state)
            .map_err(|e| RuntimeError::Engine(format!("linking metadata: {e:#}")))?;
        super::wit_version::add_older_versions_to_linker(&mut linker)
            .map_err(|e| RuntimeError::Engine(format!("linking older WIT versions: {e:#}")))?;
        // wasi:nn@0.2.0-rc-2024-10-28 (graph, tensor, inference, errors); see super::nn.
        let nn_error = |e: wasmtime::Error| RuntimeError::Engine(format!("linking wasi:nn: {e:#}"));
        nn::tensor::add_to_linker::<_, HasSelf<StoreState>>(&mut linker, |state| state).map_err(nn_error)?;
        nn::errors::add_to_linker::<_, HasSelf<StoreState>>(&mut linker, |state| state).map_err(nn_error)?;
        nn::inference::add_to_linker::<_, HasSelf<StoreState>>(&mut linker, |state| state).map_err(nn_error)?;
        nn::graph::add_to_linker::<_, HasSelf<StoreState>>(&mut linker, |state| state).map_err(nn_error)?;

        let precompiled = cache_dir.map(|dir| Precompiled::new(dir, &engine));
        let ticker = Ticker::start(engine.clone())?;
        Ok(Self {
            engine,
            linker: Arc::new(linker),
            _ticker: Arc::new(ticker),
            cache: compile_cache,
            plugin_page: Arc::default(),
            components: Arc::default(),
            precompiled,
        })
    }

    /// The compile cache's (hits, misses) so far, if there is a cache.
    pub(super) fn cache_lookups(&self) -> Option<(usize, usize)> {
        self.cache
            .as_ref()
            .map(|cache| (cache.cache_hits(), cache.cache_misses()))
    }

    /// The plugin metrics of a new version `version` of `model`, on the server's page.
    pub fn plugin_metrics(&self, model: &str, version: &str) -> PluginMetrics {
        PluginMetrics::new(self.plugin_page.clone(), model, version)
    }

    /// The stages compiled ahead of time, if there is a cache folder.
    pub(super) fn precompiled(&self) -> Option<&Precompiled> {
        self.precompiled.as_ref()
    }

    pub(super) fn components(&self) -> &Components {
        &self.components
    }

    /// How many distinct compiled components the loaded stages hold (stages whose files
    /// have the same bytes share one).
    pub fn components_held(&self) -> usize {
        self.components.len()
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn linker(&self) -> &Linker<StoreState> {
        &self.linker
    }
}

struct Ticker {
    stop: Arc<AtomicBool>,
}

impl Ticker {
    fn start(engine: Engine) -> Result<Self, RuntimeError> {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        thread::Builder::new()
            .name("tensorplug-epoch".into())
            .spawn(move || {
                while !stopped.load(Ordering::Relaxed) {
                    thread::sleep(EPOCH_TICK);
                    engine.increment_epoch();
                }
            })
            .map_err(|e| RuntimeError::Engine(format!("cannot start the epoch ticker: {e}")))?;
        Ok(Self { stop })
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
