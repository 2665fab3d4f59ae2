//! Watching the repository folder: a changed, added or removed model folder is reloaded,
//! loaded or unloaded in the background.
//!
//! File events are mapped to the model folder they happened in, gathered for a debounce
//! time (a build that writes a `.wasm` in several steps, or a copy of several files,
//! becomes one reload), and handed one name at a time to [`Repository::reconcile`], which
//! reloads only when the folder's files really changed.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use notify::{EventKindMask, RecursiveMode, Watcher};
use tokio::sync::mpsc;

use super::Repository;

/// How often the repository is looked at when it cannot be watched through events.
const FALLBACK_POLL: Duration = Duration::from_secs(2);

/// Keeps the watch alive; dropping it stops watching.
pub enum RepositoryWatch {
    Events(notify::RecommendedWatcher),
    Polling(notify::PollWatcher),
}

/// Starts watching `repository`'s root: through file-system events, or by looking every
/// `poll` if given, or when the kernel refuses events for so many folders (its inotify
/// watch limit). Events are gathered for `debounce` after the first of a burst, then the
/// folders they touched are reconciled, each once.
pub fn watch(
    repository: Arc<Repository>,
    debounce: Duration,
    poll: Option<Duration>,
) -> notify::Result<RepositoryWatch> {
    let root = repository
        .root()
        .canonicalize()
        .unwrap_or_else(|_| repository.root().to_path_buf());
    let (names_tx, mut names_rx) = mpsc::unbounded_channel::<BTreeSet<String>>();
    let on_event = || {
        let (root, names_tx) = (root.clone(), names_tx.clone());
        move |event: notify::Result<notify::Event>| match event {
            Ok(event) => {
                let names: BTreeSet<String> = if event.need_rescan() {
                    // Events were lost (the kernel's queue overflowed): look at everything.
                    BTreeSet::from([String::new()])
                } else {
                    event.paths.iter().filter_map(|path| model_of(&root, path)).collect()
                };
                if !names.is_empty() {
                    let _ = names_tx.send(names);
                }
            }
            Err(error) => tracing::warn!("watching the repository: {error}"),
        }
    };
    // Opening, reading and closing files (every load reads its folder) are not changes.
    let changes = notify::Config::default().with_event_kinds(EventKindMask::CORE);
    let watching = match poll {
        Some(every) => poll_repository(&root, changes.with_poll_interval(every), on_event())?,
        None => {
            let events = notify::RecommendedWatcher::new(on_event(), changes.clone()).and_then(|mut watcher| {
                watcher.watch(&root, RecursiveMode::Recursive)?;
                Ok(watcher)
            });
            match events {
                Ok(watcher) => RepositoryWatch::Events(watcher),
                Err(error) => {
                    tracing::warn!(
                        poll_ms = FALLBACK_POLL.as_millis() as u64,
                        "cannot follow the repository's file events ({error}): looking at its files every 2 s \
                         instead (raise fs.inotify.max_user_watches, or set --watch-poll-ms)"
                    );
                    poll_repository(&root, changes.with_poll_interval(FALLBACK_POLL), on_event())?
                }
            }
        }
    };
    drop(names_tx);
    tokio::spawn(async move {
        while let Some(mut names) = names_rx.recv().await {
            // A build writing a `.wasm` in several steps, or a copy of several files,
            // becomes one reconcile.
            tokio::time::sleep(debounce).await;
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
    let how = match watching {
        RepositoryWatch::Events(_) => "file events",
        RepositoryWatch::Polling(_) => "looking at its files",
    };
    tracing::info!(root = %root.display(), how, "watching the model repository");
    Ok(watching)
}

/// A watch that looks at every file under `root` at the config's interval: a file whose
/// size or write time (to the nanosecond, earlier or later) differs from the last look's
/// becomes an event, so a same-size rewrite within one second, or a rollback to an older
/// file, is seen.
fn poll_repository(
    root: &Path,
    config: notify::Config,
    on_event: impl notify::EventHandler,
) -> notify::Result<RepositoryWatch> {
    let mut watcher = notify::PollWatcher::new(on_event, config)?;
    watcher.watch(root, RecursiveMode::Recursive)?;
    Ok(RepositoryWatch::Polling(watcher))
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
