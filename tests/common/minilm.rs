//! The example repository's real model, `minilm` (examples/models/minilm): its folder as
//! `scripts/minilm.sh` and `scripts/build-plugins.sh` leave it, and repositories holding
//! it alone, for the tests that serve it (tests/e2e/minilm.rs, tests/limits/nn.rs).

use std::path::PathBuf;

/// The example model's folder, checked to hold what `scripts/minilm.sh` writes.
pub fn minilm_folder() -> PathBuf {
    let folder = super::example_repository().join("minilm");
    for file in ["minilm.onnx", "tokenizer.json", "preprocess.wasm", "predict.wasm"] {
        assert!(
            folder.join(file).is_file(),
            "{} is missing: run ./scripts/minilm.sh and ./scripts/build-plugins.sh (./scripts/test.sh does both)",
            folder.join(file).display()
        );
    }
    folder
}

/// A repository holding `minilm` alone (its files hard-linked, the graph on `backend`), as
/// model `name`.
pub fn minilm_repository(name: &str, backend: &str) -> tempfile::TempDir {
    minilm_repository_with(name, backend, &[])
}

/// [`minilm_repository`], with `model.toml`'s lines changed by `replace` (old, new).
pub fn minilm_repository_with(name: &str, backend: &str, replace: &[(&str, &str)]) -> tempfile::TempDir {
    let source = minilm_folder();
    let repository = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("a temporary repository");
    let folder = repository.path().join(name);
    std::fs::create_dir(&folder).unwrap();
    for entry in std::fs::read_dir(&source).unwrap() {
        let entry = entry.unwrap();
        let file = entry.file_name();
        if file == "model.toml" {
            continue;
        }
        if std::fs::hard_link(entry.path(), folder.join(&file)).is_err() {
            std::fs::copy(entry.path(), folder.join(&file)).unwrap();
        }
    }
    let config = std::fs::read_to_string(source.join("model.toml"))
        .unwrap()
        .replace("name = \"minilm\"", &format!("name = \"{name}\""))
        .replace("backend = \"onnxruntime\"", &format!("backend = \"{backend}\""));
    let config = replace.iter().fold(config, |config, (old, new)| {
        assert!(config.contains(old), "minilm's model.toml has no {old:?}");
        config.replace(old, new)
    });
    std::fs::write(folder.join("model.toml"), config).unwrap();
    repository
}
