//! The repository extension's rules and answers, for every edge: who may read the
//! index and who may load or unload models, and what the index lists.
//!
//! Load and unload change what every client is served, so they are refused unless the
//! server has an admin token (and the caller presents it) or the operator opened them
//! explicitly ([`RepositoryApi::Open`]); they are also refused under
//! [`ModelControl::None`]. With a token set, the index demands it too.
//! [`RepositoryApi::Off`] switches everything off.

use super::error::ServeError;
use crate::serving::{ModelState, ModelStatus, Repository};

/// How the set of served models may change while the server runs (as Triton's
/// `--model-control-mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ModelControl {
    /// Load every model at start, and reload a model whenever its folder changes.
    Poll,
    /// Load only `--load-model` models at start; change models through the repository API.
    Explicit,
    /// Load every model at start; nothing changes afterwards.
    None,
}

/// Who may use the repository API (`/v2/repository/...`).
///
/// Loading and unloading change what every client is served, so by default they need
/// the admin token: anyone who could reach the port could otherwise unload a model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum RepositoryApi {
    /// The index is served; load and unload need `--admin-token` (refused without one).
    #[value(alias = "true")]
    On,
    /// Load and unload are allowed without a token (unless one is set): for trusted
    /// networks only; the server warns at start.
    Open,
    /// Nothing under /v2/repository is served.
    #[value(alias = "false")]
    Off,
}

/// The repository API's access rules, as the server was started with.
#[derive(Clone, Debug)]
pub struct RepositoryAccess {
    pub api: RepositoryApi,
    pub model_control: ModelControl,
    /// Bearer token the API demands, if any.
    pub admin_token: Option<String>,
}

impl RepositoryAccess {
    /// Whether a caller presenting `token` may read the index.
    pub fn check_read(&self, token: Option<&str>) -> Result<(), ServeError> {
        if self.api == RepositoryApi::Off {
            return Err(ServeError::Forbidden(
                "the repository API is disabled (--repository-api off)".into(),
            ));
        }
        let Some(expected) = &self.admin_token else {
            return Ok(());
        };
        if token.is_some_and(|t| constant_time_eq(t.as_bytes(), expected.as_bytes())) {
            Ok(())
        } else {
            Err(ServeError::Unauthorized)
        }
    }

    /// Whether a caller presenting `token` may load or unload models.
    pub fn check_change(&self, token: Option<&str>) -> Result<(), ServeError> {
        self.check_read(token)?;
        if self.admin_token.is_none() && self.api != RepositoryApi::Open {
            return Err(ServeError::Forbidden(
                "loading and unloading models needs an admin token: start the server with --admin-token \
                 (or, on a trusted network only, --repository-api open)"
                    .into(),
            ));
        }
        if self.model_control == ModelControl::None {
            return Err(ServeError::Forbidden(
                "models cannot be loaded or unloaded under --model-control none".into(),
            ));
        }
        Ok(())
    }
}

/// Compares without leaking where the first difference is.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// One row of the repository index.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct IndexRow {
    pub name: String,
    pub state: ModelState,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What a resident model holds, measured (instances, its share of code, graphs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    /// Milliseconds since a resident model's latest request (or its load).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_ms: Option<u64>,
    /// A resident model's instances now (they follow the load).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instances: Option<usize>,
    /// Whether the model stays resident whatever the residency policy says
    /// (`[residency] pinned`, or loaded through this API).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub pinned: bool,
}

/// Every model the server knows, and every model folder it has not been asked to load
/// (explicit mode), sorted by name.
pub fn index(repository: &Repository) -> Vec<IndexRow> {
    let loads = repository.loads_on_demand();
    let mut rows: Vec<IndexRow> = repository
        .index()
        .into_iter()
        .map(|(name, entry)| {
            let model = entry.status.model();
            // A model on standby that a request is loading shows as loading, with what its
            // load waits for if it has not begun.
            let (state, waiting_for) = match (entry.status.state(), loads.get(&name)) {
                (ModelState::Standby, Some(load)) => (ModelState::Loading, load.waiting_for()),
                (state, _) => (state, None),
            };
            let version = match &entry.status {
                ModelStatus::Standby(standby) => Some(standby.config.version.clone()),
                status => status.model().map(|m| m.config.version.clone()),
            };
            IndexRow {
                state,
                version,
                reason: entry.status.reason().or(waiting_for).map(str::to_owned),
                memory_bytes: model.map(|m| m.held_bytes()),
                idle_ms: model.map(|m| u64::try_from(m.last_used.ago().as_millis()).unwrap_or(u64::MAX)),
                instances: model.map(|m| m.instances()),
                pinned: entry.pinned(),
                name,
            }
        })
        .collect();
    // Folders not known (yet): being indexed at start (on demand), or not asked for.
    let indexing = repository.is_indexing();
    for name in repository.model_folders().unwrap_or_default() {
        if !rows.iter().any(|row| row.name == name) {
            rows.push(IndexRow {
                name,
                state: if indexing {
                    ModelState::Loading
                } else {
                    ModelState::Unavailable
                },
                version: None,
                reason: Some(if indexing { "indexing" } else { "not loaded" }.into()),
                memory_bytes: None,
                idle_ms: None,
                instances: None,
                pinned: false,
            });
        }
    }
    rows.sort_by(|a, b| a.name.cmp(&b.name));
    rows
}

/// A change to what the server serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    Load,
    Unload,
}

/// Loads or unloads `name` for a caller presenting `token`, under `access`'s rules.
pub async fn change(
    repository: &Repository,
    access: &RepositoryAccess,
    token: Option<&str>,
    name: &str,
    change: Change,
) -> Result<(), ServeError> {
    access.check_change(token)?;
    match change {
        Change::Load => repository.load(name, crate::serving::residency::API).await?,
        Change::Unload => repository.unload(name).await?,
    }
    Ok(())
}
