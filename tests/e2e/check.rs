//! `tensorplug check`: its verdicts on a good repository and on every kind of broken
//! model folder, compared with snapshots in tests/snapshots/.

use crate::common;

use std::path::Path;
use std::process::Command;

pub(crate) fn check(repository: &Path) -> (i32, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_tensorplug"))
        .arg("check")
        .arg(repository)
        .arg("--cache-dir")
        .arg(common::compile_cache())
        .output()
        .expect("run tensorplug check");
    let stdout = String::from_utf8_lossy(&output.stdout).replace(&repository.display().to_string(), "<repo>");
    (output.status.code().unwrap_or(-1), stdout)
}

/// Compares with `tests/snapshots/{name}.txt`; `UPDATE_SNAPSHOTS=1` rewrites it.
fn assert_snapshot(name: &str, actual: &str) {
    let path = common::root().join("tests/snapshots").join(format!("{name}.txt"));
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|_| panic!("{} is missing", path.display()));
    assert_eq!(
        actual, expected,
        "snapshot {name} differs (UPDATE_SNAPSHOTS=1 to accept)"
    );
}

#[test]
fn the_example_repository_is_valid() {
    common::require_plugins(&common::examples());
    let (code, out) = check(&common::examples());
    assert_eq!(code, 0, "{out}");
    assert_snapshot("check_examples", &out);
}

#[test]
fn broken_model_folders_are_each_explained() {
    let repository = tempfile::tempdir().unwrap();
    let root = repository.path();
    let faulty = std::fs::read(common::root().join("tests/models/faulty/predict.wasm")).expect("built plugins");
    let good = common::faulty_config("max_batch_size = 4", "instances = 1");
    let folder = |name: &str, toml: &str, wasm: &[u8]| {
        let dir = root.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("model.toml"), toml).unwrap();
        if !wasm.is_empty() {
            std::fs::write(dir.join("predict.wasm"), wasm).unwrap();
        }
    };
    folder("good", &good, &faulty);
    folder("typo", &good.replace("max_batch_size", "max_batch"), &faulty);
    folder("bad-datatype", &good.replace("\"FP32\"", "\"FLOAT\""), &faulty);
    folder(
        "escape",
        &good.replace("\"predict.wasm\"", "\"../good/predict.wasm\""),
        &faulty,
    );
    folder("missing-wasm", &good, b"");
    folder("corrupt", &good, b"\0asm\x0d\0\x01\0garbage");
    folder("not-wasm", &good, b"#!/bin/sh\necho hi\n");
    folder(
        "init-fails",
        &format!("{good}\n[parameters]\nfail_init = \"true\"\n"),
        &faulty,
    );
    folder(
        "wrong-world",
        &good.replace("predict = ", "preprocess = \"predict.wasm\"\npredict = "),
        &faulty,
    );
    std::fs::create_dir_all(root.join("no-config")).unwrap();

    let (code, out) = check(root);
    assert_eq!(code, 1, "{out}");
    assert_snapshot("check_broken", &out);
}
