//! The model repository: a folder of model folders, and the live version of each.
//!
//! The map from names to models sits behind an `ArcSwap`: readers (every request) take a
//! snapshot without locking, and a (re)load swaps in a new map atomically. Requests that
//! already hold an `Arc<Model>` finish on the version they started on.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

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

/// One model folder's entry.
#[derive(Clone)]
pub struct Entry {
    pub state: ModelState,
    /// The live version, when there is one.
    pub model: Option<Arc<Model>>,
    /// Why the last load failed.
    pub reason: Option<String>,
}

/// Every model the server knows, by name.
pub struct Repository {
    root: PathBuf,
    runtime: Runtime,
    entries: ArcSwap<BTreeMap<String, Entry>>,
}

impl Repository {
    /// Loads every model folder under `root` (folders holding a `model.toml`). A model
    /// that fails to load is listed as UNAVAILABLE with its reason; the others serve.
    pub async fn open(root: &Path, runtime: Runtime) -> std::io::Result<Self> {
        let repository = Self {
            root: root.to_path_buf(),
            runtime,
            entries: ArcSwap::from_pointee(BTreeMap::new()),
        };
        for name in repository.model_folders()? {
            // A failure is logged and shown in the index; the other models still serve.
            let _ = repository.load(&name).await;
        }
        Ok(repository)
    }

    /// Names of the model folders under the root, sorted.
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

    /// (Re)loads one model folder in the background; the previous version keeps serving
    /// until the new one is ready, and stays when the new one fails.
    pub async fn load(&self, name: &str) -> Result<(), Arc<LoadError>> {
        let dir = self.root.join(name);
        let runtime = self.runtime.clone();
        let tokio = tokio::runtime::Handle::current();
        let started = std::time::Instant::now();
        let loaded = tokio::task::spawn_blocking(move || Model::load(&runtime, &dir, &tokio))
            .await
            .unwrap_or_else(|e| Err(LoadError::Threads(std::io::Error::other(e.to_string()))));
        let previous = self.entries.load().get(name).and_then(|e| e.model.clone());
        let (entry, result) = match loaded {
            Ok(model) => {
                tracing::info!(
                    model = name,
                    version = %model.config.version,
                    instances = model.config.limits.instances,
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "model ready"
                );
                (
                    Entry {
                        state: ModelState::Ready,
                        model: Some(Arc::new(model)),
                        reason: None,
                    },
                    Ok(()),
                )
            }
            Err(error) => {
                tracing::error!(model = name, "model failed to load: {error}");
                let state = if previous.is_some() {
                    ModelState::Ready
                } else {
                    ModelState::Unavailable
                };
                let reason = Some(error.to_string());
                (
                    Entry {
                        state,
                        model: previous,
                        reason,
                    },
                    Err(Arc::new(error)),
                )
            }
        };
        self.entries.rcu(|entries| {
            let mut entries = BTreeMap::clone(entries);
            entries.insert(name.to_string(), entry.clone());
            entries
        });
        result
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

    /// Whether every known model has a live version.
    pub fn all_ready(&self) -> bool {
        self.entries.load().values().all(|e| e.model.is_some())
    }

    /// Removes every model and waits until their queued and running items are answered.
    pub async fn drain(&self) {
        let entries = self.entries.swap(Arc::new(BTreeMap::new()));
        let models: Vec<Arc<Model>> = entries.values().filter_map(|e| e.model.clone()).collect();
        drop(entries);
        for model in models {
            // Requests still running hold their own Arc; wait for them to let go.
            let mut model = model;
            loop {
                match Arc::try_unwrap(model) {
                    Ok(owned) => {
                        let _ = tokio::task::spawn_blocking(move || owned.drain()).await;
                        break;
                    }
                    Err(shared) => {
                        model = shared;
                        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                    }
                }
            }
        }
    }
}
