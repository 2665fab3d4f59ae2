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
use super::memory::CompiledCode;

/// The folder under a cache directory that holds the mapped files.
const FOLDER: &str = "precompiled";
/// The folder under that one of what each stage file's digest was when last read.
const FILES: &str = "files";

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
    pub fn load(&self, engine: &Engine, digest: &Digest) -> Option<CompiledCode> {
        let path = self.path(digest);
        if !path.is_file() {
            return None;
        }
        // SAFETY: the file was written by `tensorplug compile` with an engine of this
        // configuration (its name carries the compatibility hash, which wasmtime checks
        // again), into the operator's cache folder; nothing untrusted writes there, and
        // files are only ever replaced whole (renamed into place), never changed.
        match unsafe { Component::deserialize_file(engine, &path) } {
            Ok(component) => Some(CompiledCode::mapped(component)),
            Err(e) => {
                tracing::warn!(file = %path.display(), "precompiled stage not used, compiling instead: {e:#}");
                None
            }
        }
    }

    /// The digest of the stage file `file` as it was when a load or `tensorplug compile`
    /// last read it, if it has not changed since (same device, inode, size, and times of
    /// its last change: a write moves its ctime, which nobody but root can set back), so
    /// that a load need neither read nor hash it (19 MB for a Python component: 15 ms).
    pub fn known_digest(&self, file: &Path) -> Option<Digest> {
        let identity = FileIdentity::of(file)?;
        let kept = std::fs::read_to_string(self.memo_path(file)).ok()?;
        let (kept_identity, digest) = kept.trim_end().split_once('\n')?;
        (kept_identity == identity.0)
            .then(|| Digest::from_hex(digest))
            .flatten()
    }

    /// Keeps `digest` as the digest of `file` with the identity it had before it was read
    /// (taken before reading, so that a change while it was read is never taken for the
    /// bytes read). A memo that cannot be written costs the next load a hash, no more.
    pub fn remember(&self, file: &Path, identity: &FileIdentity, digest: &Digest) {
        let memo = self.memo_path(file);
        let _ = self.write_whole(&memo, format!("{}\n{}\n", identity.0, digest.hex()).as_bytes());
    }

    fn memo_path(&self, file: &Path) -> PathBuf {
        use std::os::unix::ffi::OsStrExt;
        let path_digest = Digest::of(file.as_os_str().as_bytes());
        self.dir.join(FILES).join(format!("{}.digest", path_digest.hex()))
    }

    /// Keeps the compiled code of the file with this digest (written aside, then renamed
    /// into place, so a reader never maps half a file).
    pub fn save(&self, digest: &Digest, compiled: &[u8]) -> std::io::Result<()> {
        self.write_whole(&self.path(digest), compiled)
    }

    /// Writes `bytes` to `path` aside, then renames it into place.
    fn write_whole(&self, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        static WRITES: AtomicU64 = AtomicU64::new(0);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        // Unique among this process's writers and any other process's.
        let partial = path.with_extension(format!(
            "{}.{}.partial",
            std::process::id(),
            WRITES.fetch_add(1, Ordering::Relaxed)
        ));
        let written = std::fs::File::create(&partial).and_then(|mut file| file.write_all(bytes));
        match written.and_then(|()| std::fs::rename(&partial, path)) {
            Ok(()) => Ok(()),
            Err(e) => {
                let _ = std::fs::remove_file(&partial);
                Err(e)
            }
        }
    }
}

/// What tells a file's content changed without reading it: device, inode, size, and the
/// times of its last modification and last change.
#[derive(Debug, PartialEq, Eq)]
pub struct FileIdentity(String);

impl FileIdentity {
    pub fn of(file: &Path) -> Option<Self> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(file).ok()?;
        Some(Self(format!(
            "{} {} {} {}.{} {}.{}",
            meta.dev(),
            meta.ino(),
            meta.size(),
            meta.mtime(),
            meta.mtime_nsec(),
            meta.ctime(),
            meta.ctime_nsec()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_digest_holds_while_the_file_is_unchanged_and_not_after_a_write() {
        let cache = tempfile::tempdir().unwrap();
        let folder = tempfile::tempdir().unwrap();
        let file = folder.path().join("predict.wasm");
        std::fs::write(&file, b"one").unwrap();
        let precompiled = Precompiled::new(cache.path(), &Engine::default());
        assert_eq!(precompiled.known_digest(&file), None);
        let identity = FileIdentity::of(&file).unwrap();
        precompiled.remember(&file, &identity, &Digest::of(b"one"));
        assert_eq!(precompiled.known_digest(&file), Some(Digest::of(b"one")));
        // Same size, its modification time set back: the change time still moves.
        let modified = std::fs::metadata(&file).unwrap().modified().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&file, b"two").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&file)
            .unwrap()
            .set_modified(modified)
            .unwrap();
        assert_eq!(precompiled.known_digest(&file), None);
    }

    #[test]
    fn digests_read_back_as_written() {
        let digest = Digest::of(b"bytes");
        assert_eq!(Digest::from_hex(&digest.hex()), Some(digest));
        assert_eq!(Digest::from_hex("zz"), None);
        assert_eq!(Digest::from_hex(&"g".repeat(64)), None);
    }
}
