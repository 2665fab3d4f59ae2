//! Reading a file of a model folder: only regular files, and never blocking on one that is
//! not. A FIFO named as a graph would hold its model's load until something wrote to it, a
//! character device (`/dev/zero`, `/dev/urandom`) would be read up to the size cap, and a
//! socket cannot be opened at all; so every file the host reads from a model folder is
//! opened non-blocking, its type taken from the opened descriptor (no race between a check
//! and the open), and anything but a regular file refused with its type in the reason.
//!
//! Files a plugin opens through WASI are checked by the runtime (`runtime::wasi_files`);
//! both count their refusals in [`special_files_refused`], exported on `/metrics`.

use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Special files refused, server-wide: by the host reading a model folder, and by plugins
/// opening files through WASI. Process-wide like the allocator: a refusal is a property of
/// the folder, not of one server value, and both counters only grow.
static REFUSED_BY_HOST: AtomicU64 = AtomicU64::new(0);
static REFUSED_TO_PLUGINS: AtomicU64 = AtomicU64::new(0);

/// Special files refused so far: `(read by the host, opened by plugins)`.
pub fn special_files_refused() -> (u64, u64) {
    (
        REFUSED_BY_HOST.load(Ordering::Relaxed),
        REFUSED_TO_PLUGINS.load(Ordering::Relaxed),
    )
}

/// Counts one special file a plugin was refused.
pub fn count_refused_to_plugin() {
    REFUSED_TO_PLUGINS.fetch_add(1, Ordering::Relaxed);
}

/// Why a file of a model folder was not read. The text is the reason; callers name the file.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("cannot read: {0}")]
    Open(std::io::Error),
    #[error("is a {0}, not a regular file; only regular files are read from a model folder (regular-files-only)")]
    NotRegular(&'static str),
    #[error("is {size} bytes, more than {limit}: at most {max} bytes; refused")]
    TooLarge { size: u64, max: u64, limit: &'static str },
    #[error("cannot read: {0}")]
    Read(std::io::Error),
}

/// What a file type is called in a refusal, or `None` for a regular file.
pub fn special_kind(file_type: std::fs::FileType) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    if file_type.is_file() {
        None
    } else if file_type.is_fifo() {
        Some("FIFO (named pipe)")
    } else if file_type.is_char_device() {
        Some("character device")
    } else if file_type.is_block_device() {
        Some("block device")
    } else if file_type.is_socket() {
        Some("socket")
    } else if file_type.is_dir() {
        Some("directory")
    } else {
        Some("special file")
    }
}

/// Reads the regular file `path` (symlinks followed), at most `max_bytes` of it; `limit`
/// names that cap in the error. A FIFO, device, socket or directory is refused without
/// blocking and without reading a byte.
pub fn read_regular(path: &Path, max_bytes: u64, limit: &'static str) -> Result<Vec<u8>, FileError> {
    use std::os::unix::fs::OpenOptionsExt;
    // O_NONBLOCK: opening a FIFO without a writer returns at once instead of waiting for
    // one. It changes nothing for a regular file's reads.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(FileError::Open)?;
    let metadata = file.metadata().map_err(FileError::Read)?;
    if let Some(kind) = special_kind(metadata.file_type()) {
        REFUSED_BY_HOST.fetch_add(1, Ordering::Relaxed);
        return Err(FileError::NotRegular(kind));
    }
    let size = metadata.len();
    if size > max_bytes {
        return Err(FileError::TooLarge {
            size,
            max: max_bytes,
            limit,
        });
    }
    read_at_most(file, size, max_bytes, limit)
}

/// Reads `file`, expected to hold `size` bytes, failing past `max_bytes` (a file that
/// grows while it is read is still bounded).
fn read_at_most(file: File, size: u64, max_bytes: u64, limit: &'static str) -> Result<Vec<u8>, FileError> {
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    file.take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(FileError::Read)?;
    let read = bytes.len() as u64;
    if read > max_bytes {
        return Err(FileError::TooLarge {
            size: read,
            max: max_bytes,
            limit,
        });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn mkfifo(path: &Path) {
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path; mkfifo only creates a file.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    }

    #[test]
    fn regular_files_are_read_within_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"hello").unwrap();
        assert_eq!(read_regular(&path, 5, "cap").unwrap(), b"hello");
        let error = read_regular(&path, 4, "some_cap").unwrap_err().to_string();
        assert!(error.contains("5 bytes") && error.contains("some_cap"), "{error}");
    }

    #[test]
    fn a_fifo_is_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        mkfifo(&fifo);
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&fifo, &link).unwrap();
        let before = special_files_refused().0;
        for path in [&fifo, &link] {
            let started = Instant::now();
            let error = read_regular(path, 1 << 20, "cap").unwrap_err().to_string();
            assert!(started.elapsed() < Duration::from_secs(1));
            assert!(
                error.contains("FIFO") && error.contains("regular-files-only"),
                "{error}"
            );
        }
        assert!(special_files_refused().0 >= before + 2);
    }

    #[test]
    fn devices_and_directories_are_refused_unread() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        let error = read_regular(&link, 256 << 20, "cap").unwrap_err().to_string();
        assert!(error.contains("character device"), "{error}");
        let error = read_regular(dir.path(), 1 << 20, "cap").unwrap_err().to_string();
        assert!(error.contains("directory"), "{error}");
    }
}
