//! `tensorplug check`: validates a repository the way the server would load it.

use std::path::Path;

use crate::runtime::Runtime;
use crate::serving::Model;

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
    let tokio = tokio::runtime::Handle::current();
    // Plugins' WASI calls block: they must not run on an async worker thread.
    tokio::task::spawn_blocking(move || check_blocking(&repository, &runtime, &tokio))
        .await
        .map_err(std::io::Error::other)?
}

fn check_blocking(
    repository: &Path,
    runtime: &Runtime,
    tokio: &tokio::runtime::Handle,
) -> std::io::Result<Vec<Verdict>> {
    let mut names: Vec<String> = Vec::new();
    for entry in std::fs::read_dir(repository)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    names.sort();
    Ok(names
        .into_iter()
        .filter(|name| !name.starts_with('.'))
        .map(|name| {
            let dir = repository.join(&name);
            let result = Model::load_with_instances(runtime, &dir, tokio, Some(1))
                .map(|model| {
                    let c = &model.config;
                    let stages: Vec<&str> = c.stages.iter().map(|(kind, _)| kind.name()).collect();
                    format!("version {}: {}", c.version, stages.join(" -> "))
                })
                .map_err(|e| e.to_string());
            Verdict { name, result }
        })
        .collect())
}
