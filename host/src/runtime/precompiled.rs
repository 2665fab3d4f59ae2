//! Compiled stages ready to map: `tensorplug compile` writes each stage's compiled code,
//! uncompressed, to `<cache-dir>/precompiled/`, named by the SHA-256 of the stage file and
//! the engine's compatibility hash, and a load maps it back instead of going through
//! wasmtime's cache. That cache keeps code zstd-compressed, so every load decompresses and
//! copies it: 180 ms for a 19 MB Python component, most of a Python model's cold start.
//! A mapped file costs a load microseconds per megabyte, and its pages are the file's
//! (clean, shared by every process mapping it, given back under memory pressure).
//!
//! The files are native code the server runs: the folder is the operator's, as trusted as
//! the binary (like wasmtime's cache, which deserialises too). Nothing a plugin or a
//! client sends is written there.

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use wasmtime::component::Component;
use wasmtime::Engine;

use super::components::Digest;

/// The folder under a cache directory that holds the mapped files.
const FOLDER: &str = "precompiled";

/// The compiled stages of one engine configuration in one folder.
#[derive(Clone, Debug)]
pub struct Precompiled {
    dir: PathBuf,
    /// The engine's compatibility hash, in every name: a file another wasmtime version
    /// or configuration wrote is never read.
    engine_tag: String,
}

impl Precompiled {
    pub fn new(cache_dir: &Path, engine: &Engine) -> Self {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        Self {
            dir: cache_dir.join(FOLDER),
            engine_tag: format!("{:016x}", hasher.finish()),
        }
    }

    fn path(&self, digest: &Digest) -> PathBuf {
        self.dir.join(format!("{}-{}.cwasm", digest.hex(), self.engine_tag))
    }

    /// Whether the stage with this digest is there already.
    pub fn has(&self, digest: &Digest) -> bool {
        self.path(digest).is_file()
    }

    /// The component compiled from the file with this digest, mapped; `None` if there is
    /// none (or it cannot be mapped: the load compiles, and says why in the log).
    pub fn load(&self, engine: &Engine, digest: &Digest) -> Option<Component> {
        let path = self.path(digest);
        if !path.is_file() {
            return None;
        }
        // SAFETY: the file was written by `tensorplug compile` with an engine of this
        // configuration (its name carries the compatibility hash, which wasmtime checks
        // again), into the operator's cache folder; nothing untrusted writes there, and
        // files are only ever replaced whole (renamed into place), never changed.
        match unsafe { Component::deserialize_file(engine, &path) } {
            Ok(component) => Some(component),
            Err(e) => {
                tracing::warn!(file = %path.display(), "precompiled stage not used, compiling instead: {e:#}");
                None
            }
        }
    }

    /// Keeps the compiled code of the file with this digest (written aside, then renamed
    /// into place, so a reader never maps half a file).
    pub fn save(&self, digest: &Digest, compiled: &[u8]) -> std::io::Result<()> {
        static WRITES: AtomicU64 = AtomicU64::new(0);
        std::fs::create_dir_all(&self.dir)?;
        let path = self.path(digest);
        // Unique among this process's writers and any other process's.
        let partial = path.with_extension(format!(
            "{}.{}.partial",
            std::process::id(),
            WRITES.fetch_add(1, Ordering::Relaxed)
        ));
        let written = std::fs::File::create(&partial).and_then(|mut file| file.write_all(compiled));
        match written.and_then(|()| std::fs::rename(&partial, &path)) {
            Ok(()) => Ok(()),
            Err(e) => {
                let _ = std::fs::remove_file(&partial);
                Err(e)
            }
        }
    }
}
