//! Turns a stage file's bytes into a wasmtime component.

use wasmtime::component::Component;

use super::Runtime;

/// Compiles a component; the error says what the file is when it is not one.
pub fn compile(runtime: &Runtime, bytes: &[u8]) -> Result<Component, String> {
    if !bytes.starts_with(b"\0asm") {
        return Err("not a WebAssembly file (no \\0asm magic)".into());
    }
    if bytes.get(4..8) == Some(&[1, 0, 0, 0]) {
        return Err("is a core WebAssembly module, not a component: build the plugin for wasm32-wasip2".into());
    }
    Component::new(runtime.engine(), bytes).map_err(|e| format!("cannot compile: {e:#}"))
}
