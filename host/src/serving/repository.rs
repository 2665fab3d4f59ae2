//! The model repository: a folder of model folders, and the live version of each.
//!
//! The map from names to models sits behind an `ArcSwap`, and each model's entry behind
//! one of its own: readers (every request) take a snapshot without locking, a (re)load
//! swaps in the model's new entry atomically once the new version is fully ready, and
//! only adding or forgetting a name copies the map (a node may know ten thousand).
//! Requests that already hold an `Arc<Model>` finish on the version they started on; the
//! old version's instances go away when the last of them lets go. A version that fails
//! to load leaves the previous one serving.
//!
//! Under on-demand residency (`super::residency`) models start on standby, indexed but
//! not loaded; `super::on_demand` loads them on their first request and sends them back.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwap;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use super::model::{Histogramming, Model, StartError};
use super::pool::Growth;
use super::residency::{
    LoadLabels as ResidencyLoadLabels, LoadProgress, LoadTrigger, OnDemandLoad, Releases, Reservations,
    ResidencyMetrics, ResidencyPolicy, Standby, API, RELOAD, UNLOADED,
};
use super::stats::EdgeLabel;
use crate::model::config::{is_valid_model_name, ModelConfig, MODEL_FILE};
use crate::model::openmetrics::Escaped;
use crate::pipeline::LoadedModel;
use crate::runtime::{CompileSource, ModelShared, Runtime, RuntimeError};

/// A model's state as the repository index reports it (Triton's words).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum ModelState {
    Ready,
    Loading,
    /// Known and servable, nothing loaded: its first request loads it.
    Standby,
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
    /// Indexed and servable, nothing loaded (on-demand residency): its next request
    /// loads it.
    Standby(Arc<Standby>),
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
            ModelStatus::Standby(_) => ModelState::Standby,
            ModelStatus::Failed { .. } | ModelStatus::Unloaded => ModelState::Unavailable,
        }
    }

    /// What the index says about it, if anything.
    pub fn reason(&self) -> Option<&str> {
        match self {
            ModelStatus::Ready { last_error, .. } => last_error.as_deref(),
            ModelStatus::Failed { reason } => Some(reason),
            ModelStatus::Unloaded => Some("unloaded"),
            ModelStatus::Loading | ModelStatus::Standby(_) => None,
        }
    }

    /// Whether the model answers requests: a version is live, or it is on standby (its
    /// first request loads it).
    pub fn serves(&self) -> bool {
        matches!(self, ModelStatus::Ready { .. } | ModelStatus::Standby(_))
    }

    /// Whether the server can call itself ready as far as this model goes: it serves (or
    /// will, on its first request), or it was unloaded on purpose.
    pub fn counts_as_ready(&self) -> bool {
        matches!(
            self,
            ModelStatus::Ready { .. } | ModelStatus::Unloaded | ModelStatus::Standby(_)
        )
    }
}

/// One model folder's entry.
#[derive(Clone)]
pub struct Entry {
    pub status: ModelStatus,
    /// The folder's contents at the last load attempt (or indexing), to skip reloads that
    /// would load the same files again (a file system reports one change as several
    /// events).
    attempted: Option<Fingerprint>,
    /// Loaded through the repository API: resident until unloaded, never evicted.
    pinned_by_api: bool,
}

impl Entry {
    pub(super) fn new(status: ModelStatus, attempted: Option<Fingerprint>) -> Self {
        Self {
            status,
            attempted,
            pinned_by_api: false,
        }
    }

    /// `entry` (if any) in another state, everything else kept.
    pub(super) fn with_status(entry: Option<&Entry>, status: ModelStatus) -> Self {
        match entry {
            Some(entry) => Self {
                status,
                ..entry.clone()
            },
            None => Self::new(status, None),
        }
    }

    /// Whether the model stays resident whatever the residency policy says: its
    /// `model.toml` pins it, or the repository API loaded it.
    pub fn pinned(&self) -> bool {
        self.pinned_by_api
            || match &self.status {
                ModelStatus::Ready { model, .. } => model.config.pinned,
                ModelStatus::Standby(standby) => standby.config.pinned,
                _ => false,
            }
    }
}

/// One name's entry, swapped on its own so that a change of one model copies nothing of
/// the others.
pub(super) struct Slot {
    pub(super) entry: ArcSwap<Entry>,
}

/// Names, sizes and modification times of a model folder's files.
pub(super) type Fingerprint = Vec<(std::ffi::OsString, u64, Option<std::time::SystemTime>)>;

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
#[derive(Clone, Debug, thiserror::Error)]
pub enum RepositoryError {
    #[error("'{0}' is not a valid model name (letters, digits, '-', '_', '.'; not starting with '.')")]
    InvalidName(String),
    #[error("no model folder '{0}' with a model.toml in the repository")]
    NoSuchFolder(String),
    #[error("model '{0}' is not loaded")]
    NotLoaded(String),
    /// A model whose last load failed, asked for again before its folder changed: it is
    /// not loaded (nor compiled) again until then.
    #[error("model '{name}' failed to load and stays unavailable until its folder changes: {reason}")]
    Broken { name: String, reason: String },
    /// The model could not be made resident within the request's deadline.
    #[error("model '{name}' is not resident yet: {why}; retry later")]
    NotResidentYet { name: String, why: String },
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

/// A turn among the loads that run at once (an error only once the slots are closed,
/// which they never are).
pub(super) type LoadSlot = Result<tokio::sync::OwnedSemaphorePermit, tokio::sync::AcquireError>;

/// Every model the server knows, by name.
pub struct Repository {
    root: PathBuf,
    runtime: Runtime,
    pub(super) entries: ArcSwap<BTreeMap<String, Arc<Slot>>>,
    /// The slots of the models resident now, a part of `entries` kept beside them: what
    /// the budget looks at on every load and eviction (the memory held, the least
    /// recently used) then costs the resident models, not every model known (with 1,000
    /// known, summing over all of them took a third of the serving threads' time during a
    /// storm of cold loads).
    pub(super) resident: std::sync::Mutex<BTreeMap<String, Arc<Slot>>>,
    /// The statistics of every model together, whose latency histograms are on the
    /// metrics page however many models there are (metrics on).
    server_stats: Option<Arc<super::ModelStats>>,
    /// The edges that serve the models, counted from each model's start.
    edges: Vec<&'static EdgeLabel>,
    /// Loads and reloads by model and outcome.
    pub loads: Family<LoadLabels, Counter>,
    /// Set when the server starts to drain: nothing is ready any more.
    draining: std::sync::atomic::AtomicBool,
    /// Set when the drain itself begins (after any shutdown delay): nothing loads.
    loads_closed: std::sync::atomic::AtomicBool,
    /// Set while the repository is indexed at start (on demand): not ready until done.
    indexing: std::sync::atomic::AtomicBool,
    /// Which models stay resident, and what they may hold.
    pub(super) policy: ResidencyPolicy,
    /// Loads, evictions, cold starts.
    pub residency: ResidencyMetrics,
    /// Room under the budget promised to loads under way.
    pub(super) reservations: Reservations,
    /// What evicted models hold until their drop has given it back.
    pub(super) releases: Arc<Releases>,
    /// First loads of models never measured size them from their files (on a blocking
    /// thread): a few at once, not one thread per model of a storm.
    pub(super) sizing_slots: tokio::sync::Semaphore,
    /// On-demand loads under way, by model: each resolves with its times once the model
    /// is resident or failed; every request for the model waits on the same one.
    pub(super) on_demand: std::sync::Mutex<std::collections::HashMap<String, OnDemandLoad>>,
    /// Woken when a model goes back to standby or a request ends while loads wait for
    /// room (`waiting_for_room` of them).
    pub(super) room: tokio::sync::Notify,
    pub(super) waiting_for_room: std::sync::atomic::AtomicUsize,
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
    /// Itself, for what its models ask of it later (room for another instance); set
    /// when it starts keeping residency.
    pub(super) itself: std::sync::OnceLock<std::sync::Weak<Repository>>,
}

impl Repository {
    /// A repository over `root` with nothing loaded yet; its models keep latency
    /// histograms if `histograms`.
    pub fn new(root: &Path, runtime: Runtime, histograms: bool) -> Self {
        Self {
            root: root.to_path_buf(),
            runtime,
            entries: ArcSwap::from_pointee(BTreeMap::new()),
            resident: std::sync::Mutex::new(BTreeMap::new()),
            server_stats: histograms.then(|| Arc::new(super::ModelStats::new(true, &[]))),
            edges: Vec::new(),
            loads: Family::default(),
            draining: std::sync::atomic::AtomicBool::new(false),
            loads_closed: std::sync::atomic::AtomicBool::new(false),
            indexing: std::sync::atomic::AtomicBool::new(false),
            policy: ResidencyPolicy::default(),
            residency: ResidencyMetrics::default(),
            reservations: Reservations::default(),
            releases: Arc::default(),
            sizing_slots: tokio::sync::Semaphore::new(super::loaders::threads()),
            on_demand: std::sync::Mutex::default(),
            room: tokio::sync::Notify::new(),
            waiting_for_room: std::sync::atomic::AtomicUsize::new(0),
            changes: tokio::sync::watch::Sender::new(0),
            model_locks: std::sync::Mutex::new(BTreeMap::new()),
            load_slots: Arc::new(tokio::sync::Semaphore::new(super::loaders::threads())),
            dependencies: std::sync::Mutex::new(BTreeMap::new()),
            itself: std::sync::OnceLock::new(),
        }
    }

    /// The same, with the requests of `edges` counted (zero series on the metrics page)
    /// from each model's start, before any request comes through them.
    pub fn served_by(self, edges: Vec<&'static EdgeLabel>) -> Self {
        let server_stats = self
            .server_stats
            .as_ref()
            .map(|_| Arc::new(super::ModelStats::new(true, &edges)));
        Self {
            edges,
            server_stats,
            ..self
        }
    }

    /// Every model's statistics together (metrics on).
    pub fn server_stats(&self) -> Option<&Arc<super::ModelStats>> {
        self.server_stats.as_ref()
    }

    /// The same, keeping models resident as `policy` says.
    pub fn with_residency(self, policy: ResidencyPolicy) -> Self {
        Self { policy, ..self }
    }

    pub fn policy(&self) -> &ResidencyPolicy {
        &self.policy
    }

    /// Holds `name` against other changes until dropped.
    pub(super) async fn lock_model(&self, name: &str) -> tokio::sync::OwnedMutexGuard<()> {
        self.model_lock(name).lock_owned().await
    }

    /// Holds `name` against other changes if no change of it is under way.
    pub(super) fn try_lock_model(&self, name: &str) -> Option<tokio::sync::OwnedMutexGuard<()>> {
        self.model_lock(name).try_lock_owned().ok()
    }

    fn model_lock(&self, name: &str) -> Arc<tokio::sync::Mutex<()>> {
        crate::sync::lock(&self.model_locks)
            .entry(name.to_owned())
            .or_default()
            .clone()
    }

    /// Lists `names` as LOADING before their first load starts, so that readiness and
    /// the index tell the truth while the server is already listening.
    pub fn expect(&self, names: &[String]) {
        for name in names {
            self.update(name, |entry| match entry {
                Some(entry) => entry.clone(),
                None => Entry::new(ModelStatus::Loading, None),
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
    pub async fn load(&self, name: &str, trigger: LoadTrigger) -> Result<(), RepositoryError> {
        let dir = self.folder_of(name)?;
        let _this_model = self.lock_model(name).await;
        if trigger == API {
            self.update(name, |entry| Entry {
                pinned_by_api: true,
                ..entry.cloned().unwrap_or_else(|| Entry::new(ModelStatus::Loading, None))
            });
        }
        self.load_locked(name, dir, trigger).await
    }

    /// [`Self::load`], with the model's lock held by the caller.
    pub(super) async fn load_locked(
        &self,
        name: &str,
        dir: PathBuf,
        trigger: LoadTrigger,
    ) -> Result<(), RepositoryError> {
        let slot = self.load_slot().await;
        self.load_locked_in(name, dir, trigger, slot).await
    }

    /// One of the loads that may run at once, waited for.
    pub(super) async fn load_slot(&self) -> LoadSlot {
        self.load_slots.clone().acquire_owned().await
    }

    /// [`Self::load_locked`] in a load slot the caller holds already.
    pub(super) async fn load_locked_in(
        &self,
        name: &str,
        dir: PathBuf,
        trigger: LoadTrigger,
        slot: LoadSlot,
    ) -> Result<(), RepositoryError> {
        self.update(name, |entry| match entry {
            // A live version keeps serving, and keeps its state, while the next one loads;
            // a model on standby stays servable (its requests wait for this load).
            Some(entry) if entry.status.serves() => entry.clone(),
            _ => Entry::with_status(entry, ModelStatus::Loading),
        });
        let runtime = self.runtime.clone();
        let started = Instant::now();
        let kind = if self.get(name).is_some() { "reload" } else { "load" };
        let policy = self.policy;
        // Compiling and running plugins' init blocks: off the async workers, on a loader
        // thread (below the serving threads' priority). The slot is given back when the
        // load ends, even if nobody waits for it any more.
        let panicked_in = dir.clone();
        let (attempted, loaded) = super::loaders::run(move || {
            let _slot = slot;
            // Read before the load: a change during it is a change after this attempt.
            let attempted = fingerprint(&dir);
            let loaded = LoadedModel::load(&runtime, &dir, |limits| policy.instance_floor(limits));
            if may_have_compiled(&loaded) {
                crate::runtime::release_free_memory();
            }
            (attempted, loaded)
        })
        .await
        .unwrap_or_else(|e| {
            let failed = Err(RuntimeError::Sandbox(format!("loading panicked: {e}")).into());
            (fingerprint(&panicked_in), failed)
        });
        // Each resident model's own histograms are ~150 series: kept by default only when
        // every model is resident (a node with hundreds resident on demand would serve
        // scrapes of megabytes); the server-wide ones always.
        let histograms = Histogramming {
            server: self.server_stats.as_ref(),
            by_default: !self.policy.on_demand(),
        };
        let loaded = loaded.map_err(StartError::from).and_then(|loaded| {
            let growth = Growth {
                floor: self.policy.instance_floor(&loaded.config.limits),
                idle_after: self.policy.instance_idle,
                room: self.room_for_instances(name),
            };
            Model::start(loaded, histograms, &self.edges, growth)
        });
        let outcome = if loaded.is_ok() { "ready" } else { "failed" };
        self.residency
            .loads
            .get_or_create(&ResidencyLoadLabels {
                trigger: trigger.trigger,
                compiled: loaded.as_ref().map_or("none", |model| compiled_label(&model.shared)),
                outcome,
            })
            .inc();
        // Per model only when every model is resident: on demand, a node would keep a
        // series for every model it ever loaded (the residency counter has them all).
        if !self.policy.on_demand() {
            self.loads
                .get_or_create(&LoadLabels {
                    model: Escaped(name.to_owned()),
                    kind,
                    outcome,
                })
                .inc();
        }
        match loaded {
            Ok(mut model) => {
                model.load_took = started.elapsed();
                tracing::info!(
                    model = name,
                    version = %model.config.version,
                    instances = model.instances(),
                    max_instances = model.config.limits.instances,
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    compiled = %compile_summary(&model.shared),
                    graphs = %graph_summary(&model.shared),
                    "model ready"
                );
                let model = Arc::new(model);
                self.update(name, |entry| Entry {
                    attempted: attempted.clone(),
                    ..Entry::with_status(
                        entry,
                        ModelStatus::Ready {
                            model: model.clone(),
                            last_error: None,
                        },
                    )
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
                        attempted: attempted.clone(),
                        ..Entry::with_status(entry, status)
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
        let Some(model) = self.get(name) else {
            return Err(RepositoryError::NotLoaded(name.to_string()));
        };
        if self.policy.on_demand() {
            // Back to standby: unpinned, and loaded again by its next request.
            self.update(name, |entry| Entry {
                status: ModelStatus::Standby(Arc::new(standby_of(&model))),
                attempted: entry.and_then(|e| e.attempted.clone()),
                pinned_by_api: false,
            });
            self.residency.evictions.get_or_create(&UNLOADED).inc();
            self.room.notify_waiters();
            tracing::info!(model = name, "model unloaded: on standby");
            return Ok(());
        }
        self.update(name, |entry| Entry {
            status: ModelStatus::Unloaded,
            // Kept, so that only a real change of the folder loads it again.
            attempted: entry.and_then(|e| e.attempted.clone()),
            pinned_by_api: false,
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
            let entry = self.entry(name);
            let unchanged = entry
                .as_ref()
                .is_some_and(|e| e.attempted.is_some() && e.attempted == fingerprint(&dir));
            if unchanged || !is_valid_model_name(name) {
                return;
            }
            // On demand, a model not resident is indexed again (its next request loads
            // the new files); a resident one reloads, serving on meanwhile.
            let resident = entry.as_ref().is_some_and(|e| e.status.model().is_some() || e.pinned());
            if self.policy.on_demand() && !resident {
                tracing::info!(model = name, "model folder changed; indexing it again");
                self.index_locked(name, &dir);
                if !self.entry(name).is_some_and(|e| e.pinned()) {
                    return;
                }
            }
            tracing::info!(model = name, "model folder changed; loading it");
            // A failure is logged and shown in the index; the previous version serves on.
            let _ = self.load_locked(name, dir, RELOAD).await;
        } else if self.entries.load().contains_key(name) {
            self.entries.rcu(|entries| {
                let mut entries = BTreeMap::clone(entries);
                entries.remove(name);
                entries
            });
            self.track_residency(name, None);
            self.changed();
            tracing::info!(model = name, "model folder removed; model unloaded");
        }
    }

    /// Indexes `name` (its lock held by the caller): its `model.toml` validated, nothing
    /// loaded. A model whose configuration is broken is failed with the reason.
    fn index_locked(&self, name: &str, dir: &Path) {
        let attempted = fingerprint(dir);
        let status = indexed(dir);
        self.update(name, |_| Entry::new(status.clone(), attempted.clone()));
    }

    /// Whether the repository is being indexed (on demand, at start).
    pub fn is_indexing(&self) -> bool {
        self.indexing.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Says the repository is being indexed: not ready until [`Self::index_all`] is done.
    pub fn begin_indexing(&self) {
        self.indexing.store(true, std::sync::atomic::Ordering::Relaxed);
        self.changed();
    }

    /// Indexes every model folder under the root (on-demand residency): each on standby,
    /// or failed with the reason its `model.toml` gives; the server is not ready until
    /// this returns. Returns the names of the models to load now (pinned).
    pub async fn index_all(&self) -> std::io::Result<Vec<String>> {
        self.begin_indexing();
        let names = self.model_folders()?;
        let root = self.root.clone();
        // Parsing ten thousand model.toml files takes a second: on every core, off the
        // async workers.
        let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
        let chunk = names.len().div_ceil(workers).max(1);
        let mut parts = Vec::new();
        for part in names.chunks(chunk) {
            let (part, root) = (part.to_vec(), root.clone());
            parts.push(tokio::task::spawn_blocking(move || {
                part.into_iter()
                    .map(|name| {
                        let dir = root.join(&name);
                        let entry = Entry::new(indexed(&dir), fingerprint(&dir));
                        (name, entry)
                    })
                    .collect::<Vec<_>>()
            }));
        }
        let mut indexed_entries = Vec::with_capacity(names.len());
        for part in parts {
            indexed_entries.extend(part.await.map_err(std::io::Error::other)?);
        }
        let pinned: Vec<String> = indexed_entries
            .iter()
            .filter(|(_, entry)| entry.pinned())
            .map(|(name, _)| name.clone())
            .collect();
        let failed = indexed_entries
            .iter()
            .filter(|(_, entry)| matches!(entry.status, ModelStatus::Failed { .. }))
            .count();
        // One copy of the map for all of them.
        self.entries.rcu(|entries| {
            let mut entries = BTreeMap::clone(entries);
            for (name, entry) in &indexed_entries {
                let entry = match &entry.status {
                    // Listed as loading until their load below says otherwise.
                    ModelStatus::Standby(_) if entry.pinned() => Entry::new(ModelStatus::Loading, None),
                    _ => entry.clone(),
                };
                entries.insert(name.clone(), Arc::new(Slot::new(entry)));
            }
            entries
        });
        let entries = self.entries.load();
        for (name, _) in &indexed_entries {
            self.track_residency(name, entries.get(name));
        }
        drop(entries);
        self.indexing.store(false, std::sync::atomic::Ordering::Relaxed);
        self.changed();
        tracing::info!(
            models = indexed_entries.len(),
            failed,
            pinned = pinned.len(),
            "model repository indexed; models load on their first request"
        );
        Ok(pinned)
    }

    /// Every name that is either a model folder now or known from before.
    pub fn known_and_present(&self) -> Vec<String> {
        let mut names = self.model_folders().unwrap_or_default();
        names.extend(self.entries.load().keys().cloned());
        names.sort();
        names.dedup();
        names
    }

    /// Changes `name`'s entry (adding the name if it is new): only that entry is copied.
    ///
    /// Those who follow readiness hear of it when the model's readiness or the server's
    /// may have changed: a model going from standby to resident and back (thousands of
    /// times a second in a storm of cold loads) changes neither, and each follower's look
    /// reads every model known.
    pub(super) fn update(&self, name: &str, change: impl Fn(Option<&Entry>) -> Entry) {
        let existing = self.entries.load().get(name).cloned();
        let before = existing.as_ref().map(|slot| self.readiness(&slot.entry.load()));
        match existing {
            Some(slot) => {
                slot.entry.rcu(|entry| change(Some(entry.as_ref())));
            }
            None => {
                self.entries.rcu(|entries| {
                    let mut entries = BTreeMap::clone(entries);
                    let slot = match entries.get(name) {
                        Some(slot) => {
                            slot.entry.rcu(|entry| change(Some(entry.as_ref())));
                            slot.clone()
                        }
                        None => Arc::new(Slot::new(change(None))),
                    };
                    entries.insert(name.to_string(), slot);
                    entries
                });
            }
        }
        let slot = self.entries.load().get(name).cloned();
        self.track_residency(name, slot.as_ref());
        let after = slot.map(|slot| self.readiness(&slot.entry.load()));
        // A new name always counts as a change.
        if before.is_none() || before != after {
            self.changed();
        }
    }

    /// Keeps `name` in the resident index if its slot (`None`: gone) holds a resident
    /// model, out of it otherwise.
    fn track_residency(&self, name: &str, slot: Option<&Arc<Slot>>) {
        let mut resident = crate::sync::lock(&self.resident);
        match slot.filter(|slot| slot.entry.load().status.model().is_some()) {
            Some(slot) => {
                resident.insert(name.to_owned(), slot.clone());
            }
            None => {
                resident.remove(name);
            }
        }
    }

    /// What readiness makes of `entry`: whether the model serves (ready, or on standby:
    /// it will answer), and whether it lets the server be ready.
    fn readiness(&self, entry: &Entry) -> (bool, bool) {
        (entry.status.serves(), self.counts_for_readiness(entry))
    }

    /// Whether `entry` lets the server be ready (see [`Repository::all_ready`]).
    fn counts_for_readiness(&self, entry: &Entry) -> bool {
        entry.status.counts_as_ready()
            || (self.policy.on_demand() && !entry.pinned() && matches!(entry.status, ModelStatus::Failed { .. }))
    }

    /// The slots of the resident models now.
    pub(super) fn resident_slots(&self) -> Vec<(String, Arc<Slot>)> {
        crate::sync::lock(&self.resident)
            .iter()
            .map(|(name, slot)| (name.clone(), slot.clone()))
            .collect()
    }

    /// `name`'s entry now.
    pub(super) fn entry(&self, name: &str) -> Option<Arc<Entry>> {
        self.entries.load().get(name).map(|slot| slot.entry.load_full())
    }

    pub(super) fn changed(&self) {
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

    /// Whether the server is draining (or about to: readiness is off).
    pub fn is_draining(&self) -> bool {
        self.draining.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether loads are over: the drain itself has begun (during a shutdown delay,
    /// readiness is off but requests a balancer still sends are served, loads included).
    pub fn loads_closed(&self) -> bool {
        self.loads_closed.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Where a model stands, if the repository knows it.
    pub fn status(&self, name: &str) -> Option<ModelStatus> {
        self.entries
            .load()
            .get(name)
            .map(|slot| slot.entry.load().status.clone())
    }

    /// The live version of a model.
    pub fn get(&self, name: &str) -> Option<Arc<Model>> {
        self.entries
            .load()
            .get(name)
            .and_then(|slot| slot.entry.load().status.model().cloned())
    }

    /// Every known model and its state, sorted by name.
    pub fn index(&self) -> Vec<(String, Entry)> {
        self.entries
            .load()
            .iter()
            .map(|(name, slot)| (name.clone(), Entry::clone(&slot.entry.load())))
            .collect()
    }

    /// The on-demand loads that have yet to end, by model, and where each stands.
    pub fn loads_on_demand(&self) -> std::collections::HashMap<String, LoadProgress> {
        crate::sync::lock(&self.on_demand)
            .iter()
            .map(|(name, load)| (name.clone(), *load.borrow()))
            .filter(|(_, load)| load.under_way())
            .collect()
    }

    /// Whether the server is ready: not draining, and every model it should serve has a
    /// live version (none is loading for the first time, none failed without one), or
    /// (on demand) is indexed: a model whose load failed there fails its own requests,
    /// not the node's readiness. Models unloaded on purpose do not count.
    pub fn all_ready(&self) -> bool {
        !self.is_draining()
            && !self.indexing.load(std::sync::atomic::Ordering::Relaxed)
            && self
                .entries
                .load()
                .values()
                .all(|slot| self.counts_for_readiness(&slot.entry.load()))
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
        !self.is_draining() && self.entry(name).is_some_and(|entry| self.readiness(&entry).0)
    }

    /// Takes every model out of service and waits, until `deadline` at the latest, for
    /// their queued and running items to be answered and their instance threads to
    /// exit. Returns whether everything finished in time.
    pub async fn drain(&self, deadline: tokio::time::Instant) -> bool {
        self.loads_closed.store(true, std::sync::atomic::Ordering::Relaxed);
        self.begin_drain();
        let entries = self.entries.swap(Arc::new(BTreeMap::new()));
        // The index must not keep the models alive past their last request.
        crate::sync::lock(&self.resident).clear();
        self.changed();
        let models: Vec<Arc<Model>> = entries
            .values()
            .filter_map(|slot| slot.entry.load().status.model().cloned())
            .collect();
        drop(entries);
        // In-flight requests hold their own `Arc<Model>`; once the last one is answered
        // the model's queue closes, its threads exit and its completion resolves.
        let completions: Vec<_> = models.iter().map(|m| m.completion()).collect();
        drop(models);
        let all = futures_join_all(completions);
        tokio::time::timeout_at(deadline, all).await.is_ok()
    }
}

impl Slot {
    pub(super) fn new(entry: Entry) -> Self {
        Self {
            entry: ArcSwap::from_pointee(entry),
        }
    }
}

/// What indexing a model folder finds: the model on standby, or failed with the reason.
fn indexed(dir: &Path) -> ModelStatus {
    match ModelConfig::load(dir) {
        Ok(config) => ModelStatus::Standby(Arc::new(Standby::new(config))),
        Err(error) => {
            tracing::error!(folder = %dir.display(), "model failed its indexing: {error}");
            ModelStatus::Failed {
                reason: error.to_string(),
            }
        }
    }
}

/// A resident model as it goes back to standby: its configuration, what it held once
/// loaded (the room its next load makes: growth since belongs to those instances) and
/// what its plugins declared.
pub(super) fn standby_of(model: &Model) -> Standby {
    Standby {
        config: model.config.clone(),
        held_bytes: Some(model.loaded_bytes),
        metadata: model.shared.metadata(),
    }
}

/// Whether a load compiled any stage: `None` when the compile cache's counters cannot
/// tell (other compiles ran at the same time).
fn compiled(shared: &ModelShared) -> Option<bool> {
    let stages = shared.compiles.get().map(Vec::as_slice).unwrap_or_default();
    if stages.iter().any(|(_, c)| c.source == CompileSource::Compiled) {
        Some(true)
    } else if stages.iter().any(|(_, c)| c.source == CompileSource::CompiledOrCache) {
        None
    } else {
        Some(false)
    }
}

/// [`compiled`] as `tensorplug_residency_loads_total` says it.
fn compiled_label(shared: &ModelShared) -> &'static str {
    match compiled(shared) {
        Some(true) => "true",
        None => "unknown",
        Some(false) => "false",
    }
}

/// Whether a load may have compiled (or failed, maybe halfway through a compile): a
/// compile frees hundreds of MiB on its thread, given back to the OS at once. A load
/// from the cache frees little, and purging every arena after each one measured 4,750
/// `madvise` calls a second in a storm of cold loads, pages the serving threads then
/// fault back in.
fn may_have_compiled(loaded: &Result<crate::pipeline::LoadedModel, crate::pipeline::LoadError>) -> bool {
    loaded
        .as_ref()
        .map_or(true, |loaded| compiled(&loaded.shared) != Some(false))
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

    fn loaded_from(sources: &[CompileSource]) -> ModelShared {
        let shared = ModelShared::default();
        use crate::runtime::CompileReport;
        let reports = sources
            .iter()
            .map(|&source| {
                let took = std::time::Duration::from_millis(1);
                ("predict", CompileReport { took, source })
            })
            .collect();
        let _ = shared.compiles.set(reports);
        shared
    }

    #[test]
    fn only_a_load_that_may_have_compiled_counts_as_compiling() {
        use CompileSource::{Cache, Compiled, CompiledOrCache, LoadedStage};
        assert_eq!(compiled_label(&loaded_from(&[Cache, LoadedStage, Cache])), "false");
        assert_eq!(compiled_label(&loaded_from(&[Cache, Compiled])), "true");
        assert_eq!(compiled_label(&loaded_from(&[LoadedStage, CompiledOrCache])), "unknown");
        // A load that failed may have failed halfway through a compile.
        let failed = Err(crate::pipeline::LoadError::Runtime(RuntimeError::Sandbox(
            "failed".into(),
        )));
        assert!(may_have_compiled(&failed));
    }

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
        repository.update("m", |_| Entry::new(ModelStatus::Unloaded, None));
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
