//! Watching the repository folder: a changed, added or removed model folder is reloaded,
//! loaded or unloaded in the background.
//!
//! File events are debounced (a build that writes a `.wasm` in several steps, or a copy of
//! several files, becomes one reload), mapped to the model folder they happened in, and
//! handed one name at a time to [`Repository::reconcile`], which reloads only when the
//! folder's files really changed (reading them, as every load does, raises events too).

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use notify::RecursiveMode;
use notify_debouncer_mini::{new_debouncer, DebounceEventResult, Debouncer};
use tokio::sync::mpsc;

use super::Repository;

/// Keeps the watch alive; dropping it stops watching.
pub struct RepositoryWatch {
    _debouncer: Debouncer<notify::RecommendedWatcher>,
}

/// Starts watching `repository`'s root.
pub fn watch(repository: Arc<Repository>, debounce: Duration) -> notify::Result<RepositoryWatch> {
    let root = repository
        .root()
        .canonicalize()
        .unwrap_or_else(|_| repository.root().to_path_buf());
    let (names_tx, mut names_rx) = mpsc::unbounded_channel::<BTreeSet<String>>();
    let events_root = root.clone();
    let mut debouncer = new_debouncer(debounce, move |events: DebounceEventResult| match events {
        Ok(events) => {
            let names: BTreeSet<String> = events.iter().filter_map(|e| model_of(&events_root, &e.path)).collect();
            if !names.is_empty() {
                let _ = names_tx.send(names);
            }
        }
        Err(error) => tracing::warn!("watching the repository: {error}"),
    })?;
    debouncer.watcher().watch(&root, RecursiveMode::Recursive)?;
    tokio::spawn(async move {
        while let Some(mut names) = names_rx.recv().await {
            while let Ok(more) = names_rx.try_recv() {
                names.extend(more);
            }
            for name in names {
                if name.is_empty() {
                    // The root itself changed (a folder renamed into or out of it).
                    for known in repository.known_and_present() {
                        repository.reconcile(&known).await;
                    }
                } else {
                    repository.reconcile(&name).await;
                }
            }
        }
    });
    tracing::info!(root = %root.display(), "watching the model repository");
    Ok(RepositoryWatch { _debouncer: debouncer })
}

/// The model folder an event path is in: its first component under the root ("" for the
/// root itself); `None` for hidden entries and paths outside the root.
fn model_of(root: &Path, path: &Path) -> Option<String> {
    let relative = path.strip_prefix(root).ok()?;
    match relative.components().next() {
        None => Some(String::new()),
        Some(first) => {
            let name = first.as_os_str().to_str()?;
            (!name.starts_with('.')).then(|| name.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_map_to_model_folders() {
        let root = Path::new("/repo");
        assert_eq!(
            model_of(root, Path::new("/repo/digits/predict.wasm")),
            Some("digits".into())
        );
        assert_eq!(model_of(root, Path::new("/repo/digits")), Some("digits".into()));
        assert_eq!(model_of(root, Path::new("/repo")), Some(String::new()));
        assert_eq!(model_of(root, Path::new("/repo/.git/index")), None);
        assert_eq!(model_of(root, Path::new("/elsewhere/x")), None);
    }
}
