//! Reading files from the model's folder, e.g. weights at `init`.

/// Where the host mounts the model's folder (read-only) inside the sandbox.
pub const MODEL_DIR: &str = "/model";

/// Reads `relative_path` from the model folder, e.g. `read_model_file("W0.f32")`.
///
/// # Errors
/// A message naming the full path and the reason, ready to be returned from `init`.
pub fn read_model_file(relative_path: &str) -> Result<Vec<u8>, String> {
    let path = format!("{MODEL_DIR}/{}", relative_path.trim_start_matches('/'));
    std::fs::read(&path).map_err(|e| format!("cannot read {path}: {e}"))
}
