//! The model repository: a folder of model folders, and the live version of each.
//!
//! The map from names to models sits behind an `ArcSwap`: readers (every request) take a
//! snapshot without locking, and a (re)load swaps in a new map atomically once the new
//! version is fully ready. Requests that already hold an `Arc<Model>` finish on the
//! version they started on; the old version's instances go away when the last of them
//! lets go. A version that fails to load leaves the previous one serving.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwap;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use super::model::{Model, StartError};
use super::stats::EdgeLabel;
use crate::model::config::{is_valid_model_name, MODEL_FILE};
use crate::model::openmetrics::Escaped;
use crate::pipeline::LoadedModel;
use crate::runtime::{CompileSource, ModelShared, Runtime, RuntimeError};

/// A model's state as the repository index reports it (Triton's words).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum ModelState {
    Ready,
    Loading,
    Unavailable,
}

/// Where one model stands. Each variant holds exactly what that state has, so no
/// impossible combination (a ready model without a version, ...) can be written down.
#[derive(Clone)]
pub enum ModelStatus {
    /// The first load is under way; nothing serves yet.
    Loading,
    /// A version serves. `last_error`: why the latest reload failed, while this
    /// version serves on.
    Ready {
        model: Arc<Model>,
        last_error: Option<String>,
    },
    /// Loading failed and no version serves.
    Failed { reason: String },
    /// Taken out of service on request; does not count against readiness.
    Unloaded,
}

impl ModelStatus {
    /// The live version, if one serves.
    pub fn model(&self) -> Option<&Arc<Model>> {
        match self {
            ModelStatus::Ready { model, .. } => Some(model),
            _ => None,
        }
    }

    /// The state the index reports.
    pub fn state(&self) -> ModelState {
        match self {
            ModelStatus::Ready { .. } => ModelState::Ready,
            ModelStatus::Loading => ModelState::Loading,
            ModelStatus::Failed { .. } | ModelStatus::Unloaded => ModelState::Unavailable,
        }
    }

    /// What the index says about it, if anything.
    pub fn reason(&self) -> Option<&str> {
        match self {
            ModelStatus::Ready { last_error, .. } => last_error.as_deref(),
            ModelStatus::Failed { reason } => Some(reason),
            ModelStatus::Unloaded => Some("unloaded"),
            ModelStatus::Loading => None,
        }
    }

    /// Whether the server can call itself ready as far as this model goes: it serves,
    /// or it was unloaded on purpose.
    pub fn counts_as_ready(&self) -> bool {
        matches!(self, ModelStatus::Ready { .. } | ModelStatus::Unloaded)
    }
}

/// One model folder's entry.
#[derive(Clone)]
pub struct Entry {
    pub status: ModelStatus,
    /// The folder's contents at the last load attempt, to skip reloads that would load
    /// the same files again (a file system reports one change as several events).
    attempted: Option<Fingerprint>,
}

/// Names, sizes and modification times of a model folder's files.
type Fingerprint = Vec<(std::ffi::OsString, u64, Option<std::time::SystemTime>)>;

fn fingerprint(dir: &Path) -> Option<Fingerprint> {
    let mut files: Fingerprint = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let meta = entry.metadata().ok()?;
            meta.is_file()
                .then(|| (entry.file_name(), meta.len(), meta.modified().ok()))
        })
        .collect();
    files.sort();
    Some(files)
}

/// Whether `dir` has a `model.toml` of any type: one that is not a regular file (a FIFO, a
/// device) makes a model whose load fails with that reason, rather than a folder the
/// repository silently skips.
fn holds_model_file(dir: &Path) -> bool {
    dir.join(MODEL_FILE).exists()
}

/// Why a repository operation was refused.
#[derive(Debug, thiserror::Error)]
pub enum RepositoryError {
    #[error("'{0}' is not a valid model name (letters, digits, '-', '_', '.'; not starting with '.')")]
    InvalidName(String),
    #[error("no model folder '{0}' with a model.toml in the repository")]
    NoSuchFolder(String),
    #[error("model '{0}' is not loaded")]
    NotLoaded(String),
    #[error("loading model '{name}' failed: {source}")]
    Load {
        name: String,
        #[source]
        source: Arc<StartError>,
    },
}

/// The labels of `tensorplug_model_loads_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LoadLabels {
    pub model: Escaped<String>,
    /// `load` (no version was serving) or `reload` (one was, and serves on if this fails).
    pub kind: &'static str,
    /// `ready` or `failed`.
    pub outcome: &'static str,
}

/// Every model the server knows, by name.
pub struct Repository {
    root: PathBuf,
    runtime: Runtime,
    entries: ArcSwap<BTreeMap<String, Entry>>,
    /// Whether models keep latency histograms (metrics on).
    histograms: bool,
    /// The edges that serve the models, counted from each model's start.
    edges: Vec<&'static EdgeLabel>,
    /// Loads and reloads by model and outcome.
    pub loads: Family<LoadLabels, Counter>,
    /// Set when the server starts to drain: nothing is ready any more.
    draining: std::sync::atomic::AtomicBool,
    /// Bumped on every change of a model's state (and at drain), for those who follow
    /// readiness (the gRPC health service) without polling.
    changes: tokio::sync::watch::Sender<u64>,
    /// One change at a time per model (the watcher and the API may ask for the same
    /// model at once); different models load side by side.
    model_locks: std::sync::Mutex<BTreeMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Loads (compile and init) under way at once: a few, so that one slow model does not
    /// hold up the others, and not more than the cores can compile.
    load_slots: Arc<tokio::sync::Semaphore>,
    /// What besides the models readiness waits on (the queue edge's broker), by name: up
    /// or not.
    dependencies: std::sync::Mutex<BTreeMap<&'static str, bool>>,
}

impl Repository {
    /// A repository over `root` with nothing loaded yet; its models keep latency
    /// histograms if `histograms`.
    pub fn new(root: &Path, runtime: Runtime, histograms: bool) -> Self {
        Self {
            root: root.to_path_buf(),
            runtime,
            entries: ArcSwap::from_pointee(BTreeMap::new()),
            histograms,
            edges: Vec::new(),
            loads: Family::default(),
            draining: std::sync::atomic::AtomicBool::new(false),
            changes: tokio::sync::watch::Sender::new(0),
            model_locks: std::sync::Mutex::new(BTreeMap::new()),
            load_slots: Arc::new(tokio::sync::Semaphore::new(
                std::thread::available_parallelism().map_or(2, |n| n.get().clamp(1, 4)),
            )),
            dependencies: std::sync::Mutex::new(BTreeMap::new()),
        }
    }

    /// The same, with the requests of `edges` counted (zero series on the metrics page)
    /// from each model's start, before any request comes through them.
    pub fn served_by(self, edges: Vec<&'static EdgeLabel>) -> Self {
        Self { edges, ..self }
    }

    /// Holds `name` against other changes until dropped.
    async fn lock_model(&self, name: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = crate::sync::lock(&self.model_locks)
            .entry(name.to_owned())
            .or_default()
            .clone();
        lock.lock_owned().await
    }

    /// Lists `names` as LOADING before their first load starts, so that readiness and
    /// the index tell the truth while the server is already listening.
    pub fn expect(&self, names: &[String]) {
        for name in names {
            self.update(name, |entry| match entry {
                Some(entry) => entry.clone(),
                None => Entry {
                    status: ModelStatus::Loading,
                    attempted: None,
                },
            });
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Names of the model folders under the root (folders holding a `model.toml`), sorted.
    pub fn model_folders(&self) -> std::io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(&self.root)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if is_valid_model_name(&name) && holds_model_file(&entry.path()) {
                names.push(name);
            }
        }
        names.sort();
        Ok(names)
    }

    fn folder_of(&self, name: &str) -> Result<PathBuf, RepositoryError> {
        if !is_valid_model_name(name) {
            return Err(RepositoryError::InvalidName(name.to_string()));
        }
        let dir = self.root.join(name);
        if !holds_model_file(&dir) {
            return Err(RepositoryError::NoSuchFolder(name.to_string()));
        }
        Ok(dir)
    }

    /// (Re)loads one model folder in the background. The previous version keeps serving
    /// until the new one is ready, and stays when the new one fails.
    pub async fn load(&self, name: &str) -> Result<(), RepositoryError> {
        let dir = self.folder_of(name)?;
        let _this_model = self.lock_model(name).await;
        self.load_locked(name, dir).await
    }

    /// [`Self::load`], with the model's lock held by the caller.
    async fn load_locked(&self, name: &str, dir: PathBuf) -> Result<(), RepositoryError> {
        let attempted = fingerprint(&dir);
        self.update(name, |entry| match entry {
            // A live version keeps serving, and keeps its state, while the next one loads.
            Some(entry) if entry.status.model().is_some() => entry.clone(),
            _ => Entry {
                status: ModelStatus::Loading,
                attempted: None,
            },
        });
        let runtime = self.runtime.clone();
        let started = Instant::now();
        let kind = if self.get(name).is_some() { "reload" } else { "load" };
        let slot = self.load_slots.clone().acquire_owned().await;
        // Compiling and running plugins' init blocks: off the async workers. The slot is
        // given back when the load ends, even if nobody waits for it any more.
        let loaded = tokio::task::spawn_blocking(move || {
            let _slot = slot;
            let loaded = LoadedModel::load(&runtime, &dir, None);
            crate::runtime::release_free_memory();
            loaded
        })
        .await
        .unwrap_or_else(|e| Err(RuntimeError::Sandbox(format!("loading panicked: {e}")).into()));
        let histograms = self.histograms;
        let loaded = loaded
            .map_err(StartError::from)
            .and_then(|loaded| Model::start(loaded, histograms, &self.edges));
        let outcome = if loaded.is_ok() { "ready" } else { "failed" };
        self.loads
            .get_or_create(&LoadLabels {
                model: Escaped(name.to_owned()),
                kind,
                outcome,
            })
            .inc();
        match loaded {
            Ok(model) => {
                tracing::info!(
                    model = name,
                    version = %model.config.version,
                    instances = model.config.limits.instances,
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    compiled = %compile_summary(&model.shared),
                    graphs = %graph_summary(&model.shared),
                    "model ready"
                );
                let model = Arc::new(model);
                self.update(name, |_| Entry {
                    status: ModelStatus::Ready {
                        model: model.clone(),
                        last_error: None,
                    },
                    attempted: attempted.clone(),
                });
                Ok(())
            }
            Err(error) => {
                let error = Arc::new(error);
                tracing::error!(model = name, "model failed to load: {error}");
                self.update(name, |entry| {
                    let reason = error.to_string();
                    let status = match entry.and_then(|e| e.status.model()) {
                        Some(previous) => ModelStatus::Ready {
                            model: previous.clone(),
                            last_error: Some(reason),
                        },
                        None => ModelStatus::Failed { reason },
                    };
                    Entry {
                        status,
                        attempted: attempted.clone(),
                    }
                });
                Err(RepositoryError::Load {
                    name: name.to_string(),
                    source: error,
                })
            }
        }
    }

    /// How many distinct compiled components the loaded versions' stages hold.
    pub fn components_held(&self) -> usize {
        self.runtime.components_held()
    }

    /// Takes a model out of service; it stays in the index as UNAVAILABLE until it is
    /// loaded again (through the API, or in poll mode when its folder changes). Its queued
    /// and running items still finish.
    pub async fn unload(&self, name: &str) -> Result<(), RepositoryError> {
        if !is_valid_model_name(name) {
            return Err(RepositoryError::InvalidName(name.to_string()));
        }
        let _this_model = self.lock_model(name).await;
        if self.get(name).is_none() {
            return Err(RepositoryError::NotLoaded(name.to_string()));
        }
        self.update(name, |entry| Entry {
            status: ModelStatus::Unloaded,
            // Kept, so that only a real change of the folder loads it again.
            attempted: entry.and_then(|e| e.attempted.clone()),
        });
        tracing::info!(model = name, "model unloaded");
        Ok(())
    }

    /// Brings one name in line with the folder: loads (or reloads) it when its folder
    /// holds a model.toml, forgets it when the folder is gone.
    pub async fn reconcile(&self, name: &str) {
        let dir = self.root.join(name);
        // Waits for a load under way, so that its fingerprint is there to compare with.
        let _this_model = self.lock_model(name).await;
        if holds_model_file(&dir) {
            let unchanged = self
                .entries
                .load()
                .get(name)
                .is_some_and(|e| e.attempted.is_some() && e.attempted == fingerprint(&dir));
            if unchanged {
                return;
            }
            tracing::info!(model = name, "model folder changed; loading it");
            // A failure is logged and shown in the index; the previous version serves on.
            if is_valid_model_name(name) {
                let _ = self.load_locked(name, dir).await;
            }
        } else if self.entries.load().contains_key(name) {
            self.entries.rcu(|entries| {
                let mut entries = BTreeMap::clone(entries);
                entries.remove(name);
                entries
            });
            self.changed();
            tracing::info!(model = name, "model folder removed; model unloaded");
        }
    }

    /// Every name that is either a model folder now or known from before.
    pub fn known_and_present(&self) -> Vec<String> {
        let mut names = self.model_folders().unwrap_or_default();
        names.extend(self.entries.load().keys().cloned());
        names.sort();
        names.dedup();
        names
    }

    fn update(&self, name: &str, change: impl Fn(Option<&Entry>) -> Entry) {
        self.entries.rcu(|entries| {
            let mut entries = BTreeMap::clone(entries);
            let entry = change(entries.get(name));
            entries.insert(name.to_string(), entry);
            entries
        });
        self.changed();
    }

    fn changed(&self) {
        self.changes.send_modify(|generation| *generation += 1);
    }

    /// Follows changes of any model's state (and the start of the drain): the receiver
    /// sees a new value after each.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Stops calling anything ready: the server is about to drain. Requests already
    /// admitted still finish.
    pub fn begin_drain(&self) {
        self.draining.store(true, std::sync::atomic::Ordering::Relaxed);
        self.changed();
    }

    /// Whether the server is draining.
    pub fn is_draining(&self) -> bool {
        self.draining.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Where a model stands, if the repository knows it.
    pub fn status(&self, name: &str) -> Option<ModelStatus> {
        self.entries.load().get(name).map(|e| e.status.clone())
    }

    /// The live version of a model.
    pub fn get(&self, name: &str) -> Option<Arc<Model>> {
        self.entries.load().get(name).and_then(|e| e.status.model().cloned())
    }

    /// Every known model and its state, sorted by name.
    pub fn index(&self) -> Vec<(String, Entry)> {
        self.entries
            .load()
            .iter()
            .map(|(n, e)| (n.clone(), e.clone()))
            .collect()
    }

    /// Whether the server is ready: not draining, and every model it should serve has a
    /// live version (none is loading for the first time, none failed without one).
    /// Models unloaded on purpose do not count.
    pub fn all_ready(&self) -> bool {
        !self.is_draining()
            && self.entries.load().values().all(|e| e.status.counts_as_ready())
            && self.dependencies.lock().map_or(true, |d| d.values().all(|&up| up))
    }

    /// Says whether `name`, something the server needs besides its models (a broker
    /// connection), is up: the server is ready only while every dependency is.
    pub fn set_dependency(&self, name: &'static str, up: bool) {
        if let Ok(mut dependencies) = self.dependencies.lock() {
            if dependencies.insert(name, up) == Some(up) {
                return;
            }
        }
        self.changed();
    }

    /// Whether `name` serves a version and the server is not draining.
    pub fn model_ready(&self, name: &str) -> bool {
        !self.is_draining() && self.get(name).is_some()
    }

    /// Takes every model out of service and waits, until `deadline` at the latest, for
    /// their queued and running items to be answered and their instance threads to
    /// exit. Returns whether everything finished in time.
    pub async fn drain(&self, deadline: tokio::time::Instant) -> bool {
        self.begin_drain();
        let entries = self.entries.swap(Arc::new(BTreeMap::new()));
        self.changed();
        let models: Vec<Arc<Model>> = entries.values().filter_map(|e| e.status.model().cloned()).collect();
        drop(entries);
        // In-flight requests hold their own `Arc<Model>`; once the last one is answered
        // the model's queue closes, its threads exit and its completion resolves.
        let completions: Vec<_> = models.iter().map(|m| m.completion()).collect();
        drop(models);
        let all = futures_join_all(completions);
        tokio::time::timeout_at(deadline, all).await.is_ok()
    }
}

/// Awaits every completion in turn (their threads run on their own; the order is moot).
async fn futures_join_all(completions: Vec<super::instances::Completion>) {
    for completion in completions {
        completion.wait().await;
    }
}

/// Each stage's compile time and whether the compile cache served it, as
/// `predict 0.612 s (cached: false), ...` (`cached: unknown` when other compiles ran at
/// the same time, `shared with a loaded stage` when one with the same bytes lent its
/// component).
fn compile_summary(shared: &ModelShared) -> String {
    let stages = shared.compiles.get().map(Vec::as_slice).unwrap_or_default();
    let each = stages.iter().map(|(stage, compiled)| {
        let source = match compiled.source {
            CompileSource::Compiled => "cached: false",
            CompileSource::Cache => "cached: true",
            CompileSource::CompiledOrCache => "cached: unknown",
            CompileSource::LoadedStage => "shared with a loaded stage",
        };
        format!("{stage} {:.3} s ({source})", compiled.took.as_secs_f64())
    });
    each.collect::<Vec<_>>().join(", ")
}

/// Each graph's load time and what the graphs hold, for the load log (empty without graphs).
fn graph_summary(shared: &ModelShared) -> String {
    let times = shared.graphs.load_times();
    if times.is_empty() {
        return String::new();
    }
    let each = times
        .iter()
        .map(|(graph, took)| format!("{graph} {:.3} s", took.as_secs_f64()));
    format!(
        "{} ({} bytes held)",
        each.collect::<Vec<_>>().join(", "),
        shared.graphs.bytes()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn nothing_is_ready_once_the_drain_begins_and_followers_hear_of_it() {
        let folder = tempfile::tempdir().expect("temp dir");
        let runtime = Runtime::new(None).expect("runtime");
        let repository = Repository::new(folder.path(), runtime, true);
        let mut changes = repository.changes();
        assert!(repository.all_ready(), "nothing to load: ready");
        repository.expect(&["m".to_owned()]);
        assert!(changes.has_changed().expect("sender alive"));
        changes.mark_unchanged();
        assert!(!repository.all_ready(), "a model still loading");
        repository.update("m", |_| Entry {
            status: ModelStatus::Unloaded,
            attempted: None,
        });
        assert!(repository.all_ready(), "unloaded on purpose does not count");
        repository.set_dependency("broker", false);
        assert!(!repository.all_ready(), "a dependency down");
        repository.set_dependency("broker", true);
        assert!(repository.all_ready(), "the dependency back");
        changes.mark_unchanged();
        repository.begin_drain();
        assert!(changes.has_changed().expect("sender alive"));
        assert!(!repository.all_ready());
        assert!(!repository.model_ready("m"));
    }
}
