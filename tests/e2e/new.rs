//! `tensorplug new`: each language's scaffold, generated into a temporary folder, builds
//! with its own build.sh (Rust sharing the repository's target folder, so the SDK's
//! dependencies are reused) and its model folder serves as generated: `y = 2 * x` over
//! HTTP, and the plugin's own 422 for a negative item, alone in its batch.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use crate::common;

use common::{output_f32, TestServer};
use tensorplug::app::new::{scaffold, NewLanguage, NewProject, NewStage};

/// Scaffolds `name` in `language` under `parent` and runs its build.sh.
fn build(parent: &Path, name: &str, language: NewLanguage) {
    let project = NewProject {
        name: name.into(),
        stage: NewStage::Predict,
        language,
        parent: parent.into(),
        sdk: None,
        wit: None,
    };
    let root = scaffold(&project).unwrap();
    let started = Instant::now();
    let built = Command::new(root.join("build.sh"))
        .env("CARGO_TARGET_DIR", common::root().join("target"))
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "{name}: build.sh failed:\n{}{}",
        String::from_utf8_lossy(&built.stdout),
        String::from_utf8_lossy(&built.stderr)
    );
    eprintln!("new: {name} ({language:?}) built in {:.1?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread")]
async fn new_scaffolds_build_and_serve_as_generated() {
    let parent = tempfile::tempdir().unwrap();
    let languages = [
        ("double-rust", NewLanguage::Rust),
        ("double-c", NewLanguage::C),
        ("double-cpp", NewLanguage::Cpp),
    ];
    for (name, language) in languages {
        build(parent.path(), name, language);
    }
    // One repository serving the three model folders, as `tensorplug serve` would.
    let repository = parent.path().join("models");
    std::fs::create_dir(&repository).unwrap();
    for (name, _) in languages {
        std::fs::rename(
            parent.path().join(name).join("models").join(name),
            repository.join(name),
        )
        .unwrap();
    }
    let server = TestServer::start(&repository).await;
    for (name, _) in languages {
        let (status, body) = server.post_items(name, &[1.5, 4.0]).await;
        assert_eq!(status, 200, "{name}: {body}");
        assert_eq!(output_f32(&body, "y"), [3.0, 8.0], "{name}: {body}");

        let (status, body) = server.post_items(name, &[1.5, -2.0, 4.0]).await;
        assert_eq!(status, 207, "{name}: {body}");
        let results = body["results"].as_array().unwrap();
        assert_eq!(results.len(), 3, "{name}: {body}");
        assert_eq!(results[1]["status"], 422, "{name}: {body}");
        let error = results[1]["error"].as_str().unwrap();
        assert!(error.contains("is negative"), "{name}: {error}");
        for (i, want) in [(0, 3.0), (2, 8.0)] {
            assert_eq!(results[i]["status"], 200, "{name}: {body}");
            assert_eq!(output_f32(&results[i], "y"), [want], "{name}: {body}");
        }
    }
    server.stop().await;
}
