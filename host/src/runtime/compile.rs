//! Turns a stage file's bytes into a wasmtime component.
//!
//! Components (`wasm32-wasip2`) compile as they are. Core modules built for
//! `wasm32-wasip1` with the guest SDK are first wrapped into a component with the WASI
//! preview1 reactor adapter, so plugin authors can use either target. Compilation itself
//! goes through wasmtime's on-disk cache when the runtime has one (see [`super::Runtime`]).
//!
//! A plugin file larger than [`MAX_PLUGIN_BYTES`] is refused unread, and a compile that
//! runs past the model's `limits.compile_timeout_ms` fails its load with that reason (the
//! compile, which cannot be interrupted, finishes on its own thread and is thrown away),
//! so that a pathological module cannot stall a load for long. Compiles happen at load
//! only, never on the serving path; each reports how long it took and whether the cache
//! served it ([`CompileReport`]). A stage `tensorplug compile` compiled ahead of time is
//! mapped from the cache folder instead ([`super::precompiled`]). A file whose bytes a loaded stage already holds is not
//! compiled again: it gets that stage's component ([`super::components`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER;
use wasmtime::component::Component;
use wit_component::ComponentEncoder;

use super::components::Digest;
use super::memory::CompiledCode;
use super::memory_images;
use super::precompiled::FileIdentity;
use super::Runtime;

/// What kind of WebAssembly binary a file holds, from its 8-byte header.
#[derive(Debug, PartialEq, Eq)]
enum Binary {
    Component,
    CoreModule,
}

fn classify(bytes: &[u8]) -> Result<Binary, String> {
    if !bytes.starts_with(b"\0asm") {
        return Err("not a WebAssembly file (no \\0asm magic)".into());
    }
    match bytes.get(4..8) {
        Some([1, 0, 0, 0]) => Ok(Binary::CoreModule),
        Some([_, _, 1, 0]) => Ok(Binary::Component),
        _ => Err("unknown WebAssembly version or layer".into()),
    }
}

/// Wraps a `wasm32-wasip1` core module into a component.
pub fn componentize(module: &[u8]) -> Result<Vec<u8>, String> {
    ComponentEncoder::default()
        .module(module)
        .and_then(|encoder| encoder.adapter("wasi_snapshot_preview1", WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER))
        .and_then(|encoder| encoder.validate(true).encode())
        .map_err(|e| format!("is a core module that cannot be made a component (build it with the guest SDK for wasm32-wasip1 or wasm32-wasip2): {e:#}"))
}

/// Largest plugin file accepted.
pub const MAX_PLUGIN_BYTES: u64 = 64 << 20;

/// How one stage's compile went.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CompileReport {
    /// From the file's bytes to a runnable component (wrapping a core module included).
    pub took: Duration,
    pub source: CompileSource,
}

/// Where a stage's component came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompileSource {
    /// Compiled from its bytes.
    Compiled,
    /// Read from the on-disk compile cache.
    Cache,
    /// Compiled or read from the cache: other compiles ran at the same time, and the
    /// cache's counters cannot tell whose lookup hit.
    CompiledOrCache,
    /// Lent by a stage already loaded from the same bytes: nothing compiled or read, and
    /// no memory taken for code.
    LoadedStage,
}

/// Reads a plugin file: a regular file of at most [`MAX_PLUGIN_BYTES`] (a larger one is
/// refused unread, a FIFO or device without blocking).
pub fn read_plugin(file: &std::path::Path) -> Result<Vec<u8>, String> {
    crate::model::files::read_regular(file, MAX_PLUGIN_BYTES, "the plugin size cap of 64 MiB")
        .map_err(|e| e.to_string())
}

/// The component of the stage file `file`: mapped from the cache folder without reading
/// the file when it is unchanged since its digest was kept and its compiled code is
/// there (or a loaded stage holds it), else as [`compile`] makes it of the file's bytes.
pub fn compile_file(
    runtime: &Runtime,
    file: &std::path::Path,
    timeout: Duration,
) -> Result<(Arc<CompiledCode>, CompileReport), String> {
    let started = Instant::now();
    let Some(precompiled) = runtime.precompiled() else {
        return compile(runtime, read_plugin(file)?, timeout);
    };
    if let Some(digest) = precompiled.known_digest(file) {
        let mapped = runtime.components().get_or_compile(digest, || {
            precompiled
                .load(runtime.engine(), &digest)
                .map(|component| (component, ()))
                .ok_or(())
        });
        if let Ok((component, mapped)) = mapped {
            let source = match mapped {
                Some(()) => CompileSource::Cache,
                None => CompileSource::LoadedStage,
            };
            let took = started.elapsed();
            return Ok((component, CompileReport { took, source }));
        }
    }
    // Taken before reading: a change while it is read is never taken for the bytes read.
    let identity = FileIdentity::of(file);
    let bytes = read_plugin(file)?;
    let digest = Digest::of(&bytes);
    let compiled = compile_digested(runtime, digest, bytes, timeout)?;
    if let Some(identity) = identity {
        precompiled.remember(file, &identity, &digest);
    }
    Ok(compiled)
}

/// The component of a component or wasip1 core module: the one a loaded stage with the
/// same bytes holds, else compiled within `timeout` (the model's
/// `limits.compile_timeout_ms`); the error says what is wrong with it.
pub fn compile(
    runtime: &Runtime,
    bytes: Vec<u8>,
    timeout: Duration,
) -> Result<(Arc<CompiledCode>, CompileReport), String> {
    compile_digested(runtime, Digest::of(&bytes), bytes, timeout)
}

/// [`compile`], the digest of `bytes` known.
fn compile_digested(
    runtime: &Runtime,
    digest: Digest,
    bytes: Vec<u8>,
    timeout: Duration,
) -> Result<(Arc<CompiledCode>, CompileReport), String> {
    let started = Instant::now();
    let (component, compiled) = runtime
        .components()
        .get_or_compile(digest, || compile_afresh(runtime, &digest, bytes, timeout, started))?;
    let report = compiled.unwrap_or(CompileReport {
        took: started.elapsed(),
        source: CompileSource::LoadedStage,
    });
    Ok((component, report))
}

/// Compiles the stage file `file` as a load would (read, wrapped if a core module,
/// compiled within `timeout`) and keeps it where loads map it from (the cache folder's
/// [`super::precompiled::Precompiled`] stages; without a cache folder it is only checked): what `tensorplug
/// compile` does ahead of time. Nothing is instantiated.
pub fn precompile(runtime: &Runtime, file: &std::path::Path, timeout: Duration) -> Result<CompileReport, String> {
    let started = Instant::now();
    let Some(precompiled) = runtime.precompiled() else {
        return compile(runtime, read_plugin(file)?, timeout).map(|(_, report)| report);
    };
    let in_the_cache = || {
        Ok(CompileReport {
            took: started.elapsed(),
            source: CompileSource::Cache,
        })
    };
    if precompiled
        .known_digest(file)
        .is_some_and(|digest| precompiled.has(&digest))
    {
        return in_the_cache();
    }
    let identity = FileIdentity::of(file);
    let bytes = read_plugin(file)?;
    let digest = Digest::of(&bytes);
    let remember = || {
        if let Some(identity) = &identity {
            precompiled.remember(file, identity, &digest);
        }
    };
    if precompiled.has(&digest) {
        remember();
        return in_the_cache();
    }
    let bytes = as_component(bytes)?;
    let engine = runtime.engine().clone();
    let compiled = within(timeout, started, move || {
        engine
            .precompile_component(&bytes)
            .map_err(|e| format!("cannot compile: {e:#}"))
    })??;
    precompiled
        .save(&digest, &compiled)
        .map_err(|e| format!("cannot keep its compiled code in the cache folder: {e}"))?;
    remember();
    Ok(CompileReport {
        took: started.elapsed(),
        source: CompileSource::Compiled,
    })
}

/// The bytes of a component, or of a wasip1 core module wrapped into one.
fn as_component(bytes: Vec<u8>) -> Result<Vec<u8>, String> {
    match classify(&bytes)? {
        Binary::Component => Ok(bytes),
        Binary::CoreModule => componentize(&bytes),
    }
}

/// What `work` returns, run on a thread of its own, if it ends within what is left of
/// `timeout` since `started` (a compile cannot be interrupted: past the limit it finishes
/// on its thread and is thrown away).
fn within<T: Send + 'static>(
    timeout: Duration,
    started: Instant,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    let (done, finished) = std::sync::mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("tensorplug-compile".into())
        .spawn(move || {
            let _ = done.send(work());
        })
        .map_err(|e| format!("cannot start compiling: {e}"))?;
    finished
        .recv_timeout(timeout.saturating_sub(started.elapsed()))
        .map_err(|_| {
            format!(
                "compiling took longer than {} ms (limits.compile_timeout_ms); refused",
                timeout.as_millis()
            )
        })
}

fn compile_afresh(
    runtime: &Runtime,
    digest: &Digest,
    bytes: Vec<u8>,
    timeout: Duration,
    started: Instant,
) -> Result<(CompiledCode, CompileReport), String> {
    let mapped = runtime
        .precompiled()
        .and_then(|precompiled| precompiled.load(runtime.engine(), digest));
    if let Some(component) = mapped {
        let took = started.elapsed();
        return Ok((
            component,
            CompileReport {
                took,
                source: CompileSource::Cache,
            },
        ));
    }
    let bytes = as_component(bytes)?;
    let engine = runtime.engine().clone();
    let lookups = runtime.cache_lookups();
    let component = within(timeout, started, move || {
        let component = Component::new(&engine, &bytes).map_err(|e| format!("cannot compile: {e:#}"))?;
        memory_images::prepare(&component)?;
        Ok::<_, String>(component)
    })??;
    let source = served_by_cache(lookups, runtime.cache_lookups());
    Ok((
        CompiledCode::in_memory(component),
        CompileReport {
            took: started.elapsed(),
            source,
        },
    ))
}

/// Whether the cache served a compile, from its (hits, misses) before and after: with no
/// cache it did not; when both moved, other compiles ran meanwhile and it cannot tell.
fn served_by_cache(before: Option<(usize, usize)>, after: Option<(usize, usize)>) -> CompileSource {
    let (Some((hits, misses)), Some((hits_after, misses_after))) = (before, after) else {
        return CompileSource::Compiled;
    };
    match (hits_after > hits, misses_after > misses) {
        (true, false) => CompileSource::Cache,
        (false, true) => CompileSource::Compiled,
        _ => CompileSource::CompiledOrCache,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_headers() {
        assert_eq!(classify(b"\0asm\x01\0\0\0rest"), Ok(Binary::CoreModule));
        assert_eq!(classify(b"\0asm\x0d\0\x01\0rest"), Ok(Binary::Component));
        assert!(classify(b"MZ\x90\0").unwrap_err().contains("not a WebAssembly file"));
        assert!(classify(b"\0asm").is_err());
    }

    #[test]
    fn the_cache_counters_tell_a_hit_when_only_they_moved() {
        assert_eq!(served_by_cache(None, None), CompileSource::Compiled);
        assert_eq!(served_by_cache(Some((3, 1)), Some((4, 1))), CompileSource::Cache);
        assert_eq!(served_by_cache(Some((3, 1)), Some((3, 2))), CompileSource::Compiled);
        assert_eq!(
            served_by_cache(Some((3, 1)), Some((4, 2))),
            CompileSource::CompiledOrCache
        );
    }

    #[test]
    fn a_broken_module_is_refused_clearly() {
        // A core module header followed by a section id that does not exist.
        let err = componentize(b"\0asm\x01\0\0\0\xff\x00").unwrap_err();
        assert!(err.contains("core module"), "{err}");
    }
}
