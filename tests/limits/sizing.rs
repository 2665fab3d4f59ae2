//! What a model and an instance cost in resident memory (docs/operations.md, "Sizing"):
//! an extra instance of a Python model costs its plugin's live heap, not its 19 MB
//! component again, and models whose stages are the same files run from one compiled
//! copy of them, which is freed with the last model that holds it.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common;
use common::process::ServerProcess;

/// `copies` models `m0`, `m1`, … serving the Python digits example with `instances`
/// instances each; its stages are the same files (hard links) in every copy but the ones
/// listed in `distinct`, whose predict stage gets bytes of its own.
fn repository(copies: usize, instances: usize, distinct: &[usize]) -> tempfile::TempDir {
    let example = common::example_repository().join("digits-python");
    let repository = tempfile::tempdir().unwrap();
    let toml = std::fs::read_to_string(example.join("model.toml")).unwrap();
    for copy in 0..copies {
        let folder = repository.path().join(format!("m{copy}"));
        std::fs::create_dir(&folder).unwrap();
        for entry in std::fs::read_dir(&example).unwrap() {
            let name = entry.unwrap().file_name();
            if name == "model.toml" {
                continue;
            }
            std::fs::hard_link(example.join(&name), folder.join(&name)).unwrap();
        }
        if distinct.contains(&copy) {
            let predict = folder.join("predict.wasm");
            let mut bytes = std::fs::read(&predict).unwrap();
            // A custom section naming the copy: the same code in other bytes.
            let name = format!("copy-{copy}");
            bytes.extend([0, (name.len() + 1) as u8, name.len() as u8]);
            bytes.extend(name.as_bytes());
            std::fs::remove_file(&predict).unwrap();
            std::fs::write(&predict, bytes).unwrap();
        }
        let toml = toml
            .replace("name = \"digits-python\"", &format!("name = \"m{copy}\""))
            .replace("[limits]\n", &format!("[limits]\ninstances = {instances}\n"));
        std::fs::write(folder.join("model.toml"), toml).unwrap();
    }
    repository
}

async fn compiled_components(server: &ServerProcess) -> f64 {
    common::metrics::scrape_process(server)
        .await
        .value("tensorplug_compiled_components", &[])
}

/// Resident memory once every model is ready and answered one request, in MiB.
async fn ready_rss_mib(repository: &Path, copies: usize) -> (f64, ServerProcess) {
    let server = ServerProcess::spawn(repository, &[]).await;
    for copy in 0..copies {
        let answer = server
            .client
            .post(server.url(&format!("/v2/models/m{copy}/infer")))
            .json(
                &serde_json::json!({"inputs": [{"name": "input-0", "datatype": "FP32", "shape": [1, 64],
                "data": vec![3.0; 64]}]}),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    (server.rss_kib() as f64 / 1024.0, server)
}

/// Waits until the index no longer lists `model` as ready.
async fn wait_unloaded(server: &ServerProcess, model: &str) {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(30) {
        let ready = server
            .client
            .get(server.url(&format!("/v2/models/{model}/ready")))
            .send()
            .await
            .unwrap();
        if !ready.status().is_success() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{model} still ready 30 s after its folder went");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_instances_cost_their_heap_and_alike_models_share_their_components() {
    let _alone = crate::ONE_AT_A_TIME.lock().await;
    let (two_instances, server) = ready_rss_mib(repository(1, 2, &[]).path(), 1).await;
    drop(server);
    let (four_instances, server) = ready_rss_mib(repository(1, 4, &[]).path(), 1).await;
    drop(server);
    let alike = repository(4, 2, &[]);
    let (four_models, server) = ready_rss_mib(alike.path(), 4).await;
    let per_instance = (four_instances - two_instances) / 2.0;
    let per_model = (four_models - two_instances) / 3.0;
    eprintln!(
        "digits-python: 1 model x2 instances {two_instances:.1} MiB, x4 {four_instances:.1} MiB, \
         4 alike models x2 {four_models:.1} MiB: {per_instance:.1} MiB per extra instance, \
         {per_model:.1} MiB per extra alike model"
    );
    // What its calls touched of its heap (measured 7.4-7.7 MiB after one request), not
    // the component's 19 MB again.
    assert!(per_instance < 12.0, "{per_instance:.1} MiB per extra instance");
    // Its two instances (measured 15.4-16.1 MiB); each model's own copy of the compiled
    // code made it 60 MiB before.
    assert!(per_model < 24.0, "{per_model:.1} MiB per extra alike model");
    // preprocess, predict, postprocess: compiled once for the four models.
    assert_eq!(compiled_components(&server).await, 3.0);

    // The component stays while any model holds it, and goes with the last.
    for copy in 1..4 {
        std::fs::remove_dir_all(alike.path().join(format!("m{copy}"))).unwrap();
    }
    for copy in 1..4 {
        wait_unloaded(&server, &format!("m{copy}")).await;
    }
    assert_eq!(compiled_components(&server).await, 3.0);
    std::fs::remove_dir_all(alike.path().join("m0")).unwrap();
    wait_unloaded(&server, "m0").await;
    // Unready first; the version's stages go once its instance threads have ended.
    let started = Instant::now();
    while compiled_components(&server).await != 0.0 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "components still held 10 s after the last model went"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_whose_stage_differs_by_a_byte_gets_its_own_component() {
    let _alone = crate::ONE_AT_A_TIME.lock().await;
    let repository = repository(3, 1, &[2]);
    let server = ServerProcess::spawn(repository.path(), &[]).await;
    // m0 and m1 share all three; m2 shares preprocess and postprocess, not predict.
    assert_eq!(compiled_components(&server).await, 4.0);
    // Whichever load comes first compiles (or reads the cache); stages loading the same
    // bytes at once wait for it: of the 9 stages, all but those 4 were lent.
    let ready: Vec<String> = server.log().into_iter().filter(|l| l.contains("model ready")).collect();
    assert_eq!(ready.len(), 3, "{ready:?}");
    let lent: usize = ready
        .iter()
        .map(|l| l.matches("shared with a loaded stage").count())
        .sum();
    assert_eq!(lent, 5, "{ready:?}");
}

/// A reload whose stages did not change compiles nothing and holds no second copy while
/// both versions are loaded: the new version's stages share the old one's components.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_with_unchanged_stages_shares_the_serving_version_s_components() {
    let _alone = crate::ONE_AT_A_TIME.lock().await;
    let repository = repository(1, 1, &[]);
    let server = ServerProcess::spawn(repository.path(), &[]).await;
    let toml = repository.path().join("m0/model.toml");
    let changed = std::fs::read_to_string(&toml)
        .unwrap()
        .replace("pixel_max = 16", "pixel_max = 15");
    std::fs::write(&toml, changed).unwrap();
    let reloaded = server
        .wait_for_log("the reload", |l| l.contains("model ready") && l.contains("shared"))
        .await;
    assert_eq!(reloaded.matches("shared with a loaded stage").count(), 3, "{reloaded}");
    assert_eq!(compiled_components(&server).await, 3.0);
}

/// What compiling leaves behind: a server that compiled three Python models with an empty
/// compile cache, then unloaded them, keeps less than 160 MiB more than it started with
/// (measured: +93 MiB; the previous build, whose loads left the compiles' freed memory in
/// the allocator's arenas, kept +295 MiB).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compiling_cold_leaves_no_memory_behind_once_the_models_are_unloaded() {
    let _alone = crate::ONE_AT_A_TIME.lock().await;
    let models = repository(3, 1, &[0, 1, 2]);
    let served = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let cache_dir = cache.path().to_str().unwrap();
    let server = ServerProcess::spawn(served.path(), &["--cache-dir", cache_dir]).await;
    let started = server.rss_kib();
    for copy in 0..3 {
        let name = format!("m{copy}");
        std::fs::rename(models.path().join(&name), served.path().join(&name)).unwrap();
    }
    // Found by the folder watcher: listed first, then loaded (compiled cold).
    let waiting = Instant::now();
    loop {
        let index = server.wait_loaded().await;
        let rows = index.as_array().unwrap();
        if rows.len() == 3 && rows.iter().all(|row| row["state"] == "READY") {
            break;
        }
        assert!(waiting.elapsed() < common::MODELS_LOAD_WITHIN, "{index}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let loaded = server.rss_kib();
    server.reset_peak_rss();
    for copy in 0..3 {
        std::fs::remove_dir_all(served.path().join(format!("m{copy}"))).unwrap();
    }
    for copy in 0..3 {
        wait_unloaded(&server, &format!("m{copy}")).await;
    }
    // The versions' instance threads end a moment after readiness goes.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = server.rss_kib();
    eprintln!(
        "3 Python models compiled cold: RSS {} MiB at start, {} MiB loaded, {} MiB unloaded",
        started / 1024,
        loaded / 1024,
        after / 1024
    );
    assert!(
        after.saturating_sub(started) < 160 * 1024,
        "RSS {started} KiB at start, {after} KiB with every model unloaded"
    );
}

/// A model never loaded is sized from its stage files' sections without reading them
/// whole: every plugin built from the repo (Rust, C, C++, Python and JavaScript
/// components, core modules) sizes the same read section by section as read whole.
#[test]
fn every_plugin_is_sized_from_its_sections_as_from_its_whole_file() {
    let mut files = Vec::new();
    for root in [common::example_repository(), common::root().join("tests/models")] {
        for model in std::fs::read_dir(&root).unwrap() {
            for file in std::fs::read_dir(model.unwrap().path()).into_iter().flatten() {
                let path = file.unwrap().path();
                if path.extension().is_some_and(|e| e == "wasm") {
                    files.push(path);
                }
            }
        }
    }
    assert!(files.len() >= 10, "{files:?}");
    for file in files {
        let whole = tensorplug::runtime::declared_instance_bytes(&std::fs::read(&file).unwrap());
        let by_sections = tensorplug::runtime::declared_instance_bytes_of_file(&file);
        assert!(whole.is_some_and(|bytes| bytes > 0), "{}", file.display());
        assert_eq!(by_sections, whole, "{}", file.display());
    }
}
