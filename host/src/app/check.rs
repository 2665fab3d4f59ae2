//! `tensorplug check`: validates a repository the way the server would load it.

use std::path::Path;

use crate::pipeline::LoadedModel;
use crate::runtime::Runtime;

/// One model folder's verdict.
pub struct Verdict {
    pub name: String,
    /// `Ok(summary)` or `Err(what is wrong)`.
    pub result: Result<String, String>,
}

/// Loads every model folder under `repository` (config, compile, init of one instance
/// per stage) and reports each.
pub async fn check_repository(repository: &Path, runtime: &Runtime) -> std::io::Result<Vec<Verdict>> {
    let (repository, runtime) = (repository.to_path_buf(), runtime.clone());
    // Plugins' WASI calls block: they must not run on an async worker thread.
    tokio::task::spawn_blocking(move || check_blocking(&repository, &runtime))
        .await
        .map_err(std::io::Error::other)?
}

/// [`check_repository`] on the calling thread, which may block.
pub fn check_blocking(repository: &Path, runtime: &Runtime) -> std::io::Result<Vec<Verdict>> {
    let mut names: Vec<String> = Vec::new();
    for entry in std::fs::read_dir(repository)? {
        let entry = entry?;
        // A link to a model folder counts, as `serve` loads one.
        if entry.path().is_dir() {
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    names.sort();
    Ok(names
        .into_iter()
        .filter(|name| !name.starts_with('.'))
        .map(|name| {
            let dir = repository.join(&name);
            let result = LoadedModel::load(runtime, &dir, |_| 1)
                .map(|loaded| loaded.describe())
                .map_err(|e| e.to_string());
            Verdict { name, result }
        })
        .collect())
}
