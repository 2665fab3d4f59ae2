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
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;

use super::model::{LoadError, Model};
use crate::model_config::{is_valid_model_name, MODEL_FILE};
use crate::runtime::Runtime;

/// A model's state as the repository index reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum ModelState {
    Ready,
    Loading,
    Unavailable,
}

/// The reason an entry gives after an explicit unload; such a model does not count
/// against readiness.
pub const UNLOADED: &str = "unloaded";

/// One model folder's entry.
#[derive(Clone)]
pub struct Entry {
    pub state: ModelState,
    /// The live version, when there is one.
    pub model: Option<Arc<Model>>,
    /// Why the last load failed, or why the model is unavailable.
    pub reason: Option<String>,
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
        source: Arc<LoadError>,
    },
}

/// Every model the server knows, by name.
pub struct Repository {
    root: PathBuf,
    runtime: Runtime,
    entries: ArcSwap<BTreeMap<String, Entry>>,
    /// One load at a time: the watcher and the API may ask for the same model at once,
    /// and two compiles in parallel would only slow both on a small machine.
    loading: tokio::sync::Mutex<()>,
}

impl Repository {
    /// A repository over `root` with nothing loaded yet.
    pub fn new(root: &Path, runtime: Runtime) -> Self {
        Self {
            root: root.to_path_buf(),
            runtime,
            entries: ArcSwap::from_pointee(BTreeMap::new()),
            loading: tokio::sync::Mutex::new(()),
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
            if is_valid_model_name(&name) && entry.path().join(MODEL_FILE).is_file() {
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
        if !dir.join(MODEL_FILE).is_file() {
            return Err(RepositoryError::NoSuchFolder(name.to_string()));
        }
        Ok(dir)
    }

    /// (Re)loads one model folder in the background. The previous version keeps serving
    /// until the new one is ready, and stays when the new one fails.
    pub async fn load(&self, name: &str) -> Result<(), RepositoryError> {
        let dir = self.folder_of(name)?;
        let _one_at_a_time = self.loading.lock().await;
        let attempted = fingerprint(&dir);
        self.update(name, |entry| match entry {
            // A live version keeps serving, and keeps its state, while the next one loads.
            Some(entry) if entry.model.is_some() => entry.clone(),
            _ => Entry {
                state: ModelState::Loading,
                model: None,
                reason: None,
                attempted: None,
            },
        });
        let runtime = self.runtime.clone();
        let tokio = tokio::runtime::Handle::current();
        let started = Instant::now();
        let loaded = tokio::task::spawn_blocking(move || Model::load(&runtime, &dir, &tokio))
            .await
            .unwrap_or_else(|e| Err(LoadError::Threads(std::io::Error::other(e.to_string()))));
        match loaded {
            Ok(model) => {
                tracing::info!(
                    model = name,
                    version = %model.config.version,
                    instances = model.config.limits.instances,
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "model ready"
                );
                let model = Arc::new(model);
                self.update(name, |_| Entry {
                    state: ModelState::Ready,
                    model: Some(model.clone()),
                    reason: None,
                    attempted: attempted.clone(),
                });
                Ok(())
            }
            Err(error) => {
                let error = Arc::new(error);
                tracing::error!(model = name, "model failed to load: {error}");
                self.update(name, |entry| {
                    let previous = entry.and_then(|e| e.model.clone());
                    Entry {
                        state: if previous.is_some() {
                            ModelState::Ready
                        } else {
                            ModelState::Unavailable
                        },
                        model: previous,
                        reason: Some(error.to_string()),
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

    /// Takes a model out of service; it stays in the index as UNAVAILABLE until it is
    /// loaded again (through the API, or in poll mode when its folder changes). Its queued
    /// and running items still finish.
    pub async fn unload(&self, name: &str) -> Result<(), RepositoryError> {
        if !is_valid_model_name(name) {
            return Err(RepositoryError::InvalidName(name.to_string()));
        }
        let _one_at_a_time = self.loading.lock().await;
        if self.entries.load().get(name).and_then(|e| e.model.as_ref()).is_none() {
            return Err(RepositoryError::NotLoaded(name.to_string()));
        }
        self.update(name, |entry| Entry {
            state: ModelState::Unavailable,
            model: None,
            reason: Some(UNLOADED.into()),
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
        if dir.join(MODEL_FILE).is_file() {
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
            let _ = self.load(name).await;
        } else if self.entries.load().contains_key(name) {
            let _one_at_a_time = self.loading.lock().await;
            self.entries.rcu(|entries| {
                let mut entries = BTreeMap::clone(entries);
                entries.remove(name);
                entries
            });
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
    }

    /// The live version of a model.
    pub fn get(&self, name: &str) -> Option<Arc<Model>> {
        self.entries.load().get(name).and_then(|e| e.model.clone())
    }

    /// Every known model and its state, sorted by name.
    pub fn index(&self) -> Vec<(String, Entry)> {
        self.entries
            .load()
            .iter()
            .map(|(n, e)| (n.clone(), e.clone()))
            .collect()
    }

    /// Whether every known model has a live version (and no load is under way for a
    /// model without one).
    pub fn all_ready(&self) -> bool {
        self.entries
            .load()
            .values()
            .all(|e| e.model.is_some() || e.reason.as_deref() == Some(UNLOADED))
    }

    /// Takes every model out of service and waits, up to `grace`, until their queued and
    /// running items are answered.
    pub async fn drain(&self, grace: Duration) {
        let entries = self.entries.swap(Arc::new(BTreeMap::new()));
        let models: Vec<Arc<Model>> = entries.values().filter_map(|e| e.model.clone()).collect();
        drop(entries);
        let deadline = tokio::time::Instant::now() + grace;
        for model in models {
            let weak = Arc::downgrade(&model);
            drop(model);
            // In-flight requests hold their own Arc; once they are answered the model's
            // queue closes and its instance threads exit.
            while weak.strong_count() > 0 && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    }
}
