//! `tensorplug new`: each language's scaffold of each stage, generated into a temporary
//! folder, builds with its own build.sh (Rust sharing the repository's target folder, so
//! the SDK's dependencies are reused) and its model folder serves as generated:
//! `y = 2 * x` over HTTP, and the stage's own 422 for the item it refuses, alone in its
//! batch.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use crate::common;

use common::{output_f32, TestServer};
use tensorplug::app::new::{scaffold, NewLanguage, NewProject, NewStage};

/// Scaffolds `name` in `language` under `parent` and runs its build.sh.
fn build(parent: &Path, name: &str, stage: NewStage, language: NewLanguage) {
    let project = NewProject::new(name, stage, language, parent);
    let root = scaffold(&project).unwrap();
    let started = Instant::now();
    // This build's target folder (CI may move it), with the toolchains installed there
    // (scripts/toolchains.sh) unless TENSORPLUG_TOOLCHAINS says where they are.
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).parent().unwrap();
    let tools = std::env::var_os("TENSORPLUG_TOOLCHAINS").map_or_else(|| target.join("toolchains"), Into::into);
    let built = Command::new(root.join("build.sh"))
        .env("CARGO_TARGET_DIR", target)
        .env("WIT_BINDGEN", tools.join("bin/wit-bindgen"))
        .env("COMPONENTIZE_PY", tools.join("bin/componentize-py"))
        .env("COMPONENTIZE_JS", tools.join("bin/componentize-js"))
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "{name}: build.sh failed:\n{}{}",
        String::from_utf8_lossy(&built.stdout),
        String::from_utf8_lossy(&built.stderr)
    );
    eprintln!("new: {name} built in {:.1?}", started.elapsed());
}

/// An item each stage refuses, and what its 422's message says.
fn refused(stage: NewStage) -> (f32, &'static str) {
    match stage {
        NewStage::Preprocess => (-2.0, "is negative (checked by preprocess)"),
        NewStage::Predict => (-2.0, "is negative"),
        NewStage::Postprocess => (60.0, "is over 100 (checked by postprocess)"),
    }
}

/// Scaffolds and builds each (language, stage) pair, serves every model folder from one
/// repository, and checks each answers `y = 2 * x` and refuses its item alone.
async fn scaffolds_build_and_serve(pairs: &[(&str, NewLanguage, &str, NewStage)]) {
    let started = Instant::now();
    let parent = tempfile::tempdir().unwrap();
    let mut projects = Vec::new();
    for &(language_name, language, stage_name, stage) in pairs {
        let name = format!("{stage_name}-{language_name}");
        build(parent.path(), &name, stage, language);
        projects.push((name, stage));
    }
    // One repository serving every model folder, as `tensorplug serve` would.
    let repository = parent.path().join("models");
    std::fs::create_dir(&repository).unwrap();
    for (name, _) in &projects {
        std::fs::rename(
            parent.path().join(name).join("models").join(name),
            repository.join(name),
        )
        .unwrap();
    }
    let server = TestServer::start(&repository).await;
    for (name, stage) in &projects {
        let (status, body) = server.post_items(name, &[1.5, 4.0]).await;
        assert_eq!(status, 200, "{name}: {body}");
        assert_eq!(output_f32(&body, "y"), [3.0, 8.0], "{name}: {body}");

        let (value, message) = refused(*stage);
        let (status, body) = server.post_items(name, &[1.5, value, 4.0]).await;
        assert_eq!(status, 207, "{name}: {body}");
        let results = body["results"].as_array().unwrap();
        assert_eq!(results.len(), 3, "{name}: {body}");
        assert_eq!(results[1]["status"], 422, "{name}: {body}");
        let error = results[1]["error"].as_str().unwrap();
        assert!(error.contains(message), "{name}: {error}");
        for (i, want) in [(0, 3.0), (2, 8.0)] {
            assert_eq!(results[i]["status"], 200, "{name}: {body}");
            assert_eq!(output_f32(&results[i], "y"), [want], "{name}: {body}");
        }
    }
    server.stop().await;
    eprintln!(
        "new: {} projects built and served in {:.1?}",
        projects.len(),
        started.elapsed()
    );
}

const STAGES: [(&str, NewStage); 3] = [
    ("pre", NewStage::Preprocess),
    ("predict", NewStage::Predict),
    ("post", NewStage::Postprocess),
];

#[tokio::test(flavor = "multi_thread")]
async fn new_rust_c_and_cpp_scaffolds_build_and_serve_as_generated() {
    let languages = [
        ("rust", NewLanguage::Rust),
        ("c", NewLanguage::C),
        ("cpp", NewLanguage::Cpp),
    ];
    let pairs: Vec<_> = languages
        .into_iter()
        .flat_map(|(l, language)| STAGES.map(|(s, stage)| (l, language, s, stage)))
        .collect();
    scaffolds_build_and_serve(&pairs).await;
}

/// Python and JavaScript components take 5-15 s each to build and as long to compile, so
/// each language builds its predict and one of the item stages (pre- and postprocess
/// share their template; the unit test in app::new fills all of them).
#[tokio::test(flavor = "multi_thread")]
async fn new_python_and_javascript_scaffolds_build_and_serve_as_generated() {
    let pairs = [
        ("python", NewLanguage::Python, "predict", NewStage::Predict),
        ("python", NewLanguage::Python, "post", NewStage::Postprocess),
        ("js", NewLanguage::Js, "predict", NewStage::Predict),
        ("js", NewLanguage::Js, "pre", NewStage::Preprocess),
    ];
    scaffolds_build_and_serve(&pairs).await;
}
