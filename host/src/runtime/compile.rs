//! Turns a stage file's bytes into a wasmtime component.
//!
//! Components (`wasm32-wasip2`) compile as they are. Core modules built for
//! `wasm32-wasip1` with the guest SDK are first wrapped into a component with the WASI
//! preview1 reactor adapter, so plugin authors can use either target. Compilation itself
//! goes through wasmtime's on-disk cache when the runtime has one (see [`super::Runtime`]).

use wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER;
use wasmtime::component::Component;
use wit_component::ComponentEncoder;

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

/// Compiles a component or a wasip1 core module; the error says what is wrong with it.
pub fn compile(runtime: &Runtime, bytes: &[u8]) -> Result<Component, String> {
    let component_bytes;
    let bytes = match classify(bytes)? {
        Binary::Component => bytes,
        Binary::CoreModule => {
            component_bytes = componentize(bytes)?;
            &component_bytes
        }
    };
    Component::new(runtime.engine(), bytes).map_err(|e| format!("cannot compile: {e:#}"))
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
    fn a_broken_module_is_refused_clearly() {
        // A core module header followed by a section id that does not exist.
        let err = componentize(b"\0asm\x01\0\0\0\xff\x00").unwrap_err();
        assert!(err.contains("core module"), "{err}");
    }
}
