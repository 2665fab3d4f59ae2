//! Facts about the model that clients read in its metadata: REST `GET /v2/models/{m}` and
//! gRPC `ModelMetadata` return them under `parameters`.
//!
//! Declare them in `init` (afterwards the host refuses): a key is 1-64 characters of
//! `[a-zA-Z0-9_.-]`, a value at most 4096 bytes, at most 32 keys per model; the last value
//! declared for a key wins. Outside WebAssembly the calls do nothing and succeed.
//!
//! ```no_run
//! # fn init() -> Result<(), String> {
//! tensorplug_guest::metadata::declare("labels", "zero,one,two")?;
//! tensorplug_guest::metadata::declare("model_card", "https://example.com/digits")?;
//! # Ok(()) }
//! ```

/// Declares `key` = `value` in the model's metadata.
pub fn declare(key: &str, value: &str) -> Result<(), String> {
    #[cfg(target_arch = "wasm32")]
    return crate::bindings::predictor::tensorplug::plugin::metadata::declare(key, value);
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = (key, value);
        Ok(())
    }
}
