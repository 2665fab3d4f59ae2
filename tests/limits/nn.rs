//! `wasi:nn` graphs written to hurt, against the real binary: graph bombs loaded one by
//! one (the server's peak memory while each is refused), an output larger than the
//! instance, and a heavy compute past its deadline (the time to its 504 and the CPU the
//! server spends after it).

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::onnx;
use common::process::ServerProcess;
use serde_json::json;

const MIB: u64 = 1024 * 1024;

/// A faulty model folder `name` in `repository` with `graphs` written beside it.
fn faulty_model(repository: &Path, name: &str, limits: &str, graphs: &[(&str, &[u8])]) {
    let dir = repository.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(
        common::root().join("tests/models/faulty/predict.wasm"),
        dir.join("predict.wasm"),
    )
    .unwrap();
    let mut config = format!("name = \"{name}\"\n") + &common::faulty_config("max_batch_size = 8", limits);
    config.push_str("\n[graphs]\n");
    for (graph, bytes) in graphs {
        config.push_str(&format!("{graph} = \"{graph}.onnx\"\n"));
        std::fs::write(dir.join(format!("{graph}.onnx")), bytes).unwrap();
    }
    std::fs::write(dir.join("model.toml"), config).unwrap();
}

/// Every bomb of issue 18, by model name.
fn bombs() -> Vec<(&'static str, Vec<u8>, &'static str)> {
    let huge = [1 << 20, 1 << 20];
    vec![
        (
            "constant-of-shape",
            onnx::constant_of_shape(&huge),
            "limits.graph_memory_mib",
        ),
        ("expand", onnx::expand(&huge), "limits.graph_memory_mib"),
        ("range", onnx::range(1 << 40), "limits.graph_memory_mib"),
        (
            "constant-512mib",
            onnx::constant_of_shape(&[128 << 20]),
            "limits.graph_memory_mib",
        ),
        ("chain-20000", onnx::chain(20_000), "limits.graph_max_nodes"),
    ]
}

/// With `TENSORPLUG_KEEP_NN_BOMBS=dir`, a copy of `repository` as `dir/name`, for
/// before/after figures against another binary.
fn keep(repository: &Path, name: &str) {
    if let Ok(dir) = std::env::var("TENSORPLUG_KEEP_NN_BOMBS") {
        let _ = std::fs::create_dir_all(&dir);
        let to = Path::new(&dir).join(name);
        let _ = std::process::Command::new("cp")
            .arg("-r")
            .arg(repository)
            .arg(&to)
            .status();
    }
}

async fn post(server: &ServerProcess, path: &str, body: serde_json::Value) -> (u16, serde_json::Value, Duration) {
    let body = serde_json::to_vec(&body).expect("JSON");
    let (status, text, took) = server.post_timed(path, body, Duration::from_secs(120)).await;
    (status, serde_json::from_str(&text).unwrap_or(json!(text)), took)
}

async fn serves(server: &ServerProcess) {
    let body = json!({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 1], "data": [2.0]}]});
    let (status, answer, _) = post(server, "/v2/models/good/infer", body).await;
    assert_eq!(status, 200, "{answer}");
}

/// Each bomb, loaded on request while a good model serves: refused naming its limit,
/// quickly, with the server's peak memory (VmHWM) up by less than 32 MiB — nothing of
/// what the bombs describe is ever allocated. (Before: past 4 GiB within two seconds.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graph_bombs_are_refused_without_the_memory_they_describe() {
    let _alone = crate::ONE_AT_A_TIME.lock().await;
    let repository = tempfile::tempdir().unwrap();
    faulty_model(repository.path(), "good", "instances = 1", &[]);
    let bombs = bombs();
    for (name, bytes, _) in &bombs {
        faulty_model(repository.path(), name, "instances = 1", &[("bomb", bytes)]);
    }
    keep(repository.path(), "bombs");
    let mut server = ServerProcess::spawn(
        repository.path(),
        &[
            "--model-control",
            "explicit",
            "--load-model",
            "good",
            "--repository-api",
            "open",
        ],
    )
    .await;
    serves(&server).await;
    for (name, bytes, limit) in &bombs {
        let before = server.rss_kib();
        server.reset_peak_rss();
        let (status, answer, took) = post(&server, &format!("/v2/repository/models/{name}/load"), json!({})).await;
        let grew_kib = server.peak_rss_kib().saturating_sub(before);
        eprintln!(
            "nn bomb {name} ({} bytes): {status} in {took:?}, peak RSS +{} KiB",
            bytes.len(),
            grew_kib
        );
        assert!(server.is_alive(), "{name}: the server died");
        assert_ne!(status, 200, "{name}: {answer}");
        let text = answer.to_string();
        assert!(text.contains(limit), "{name}: {text}");
        assert!(took < Duration::from_secs(10), "{name}: {took:?}");
        assert!(grew_kib < 32 * MIB / 1024, "{name}: peak RSS grew by {grew_kib} KiB");
        serves(&server).await;
    }
}

/// An output of 256 MiB for an instance of 64 MiB: the item's error, computed never.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_output_costs_the_host_nothing() {
    let _alone = crate::ONE_AT_A_TIME.lock().await;
    let repository = tempfile::tempdir().unwrap();
    let wide = onnx::widen(65_536);
    faulty_model(
        repository.path(),
        "good",
        "instances = 1\nmemory_mib = 64",
        &[("wide", &wide)],
    );
    keep(repository.path(), "wide");
    let server = ServerProcess::spawn(repository.path(), &[]).await;
    let before = server.rss_kib();
    server.reset_peak_rss();
    let body = json!({"inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 1], "data": [1.0, -41.0]}]});
    let (status, answer, _) = post(&server, "/v2/models/good/infer", body).await;
    let grew_kib = server.peak_rss_kib().saturating_sub(before);
    eprintln!("nn wide output: {status}, peak RSS +{grew_kib} KiB");
    assert_eq!(status, 207, "{answer}");
    assert!(answer.to_string().contains("limits.memory_mib"), "{answer}");
    assert!(grew_kib < 32 * MIB / 1024, "peak RSS grew by {grew_kib} KiB");
}

/// The server's CPU time so far (user + system), from `/proc/<pid>/stat`.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Duration::from_millis(ticks * 1000 / hz.max(1))
}

/// 200 chained [256, 1024] x [1024, 1024] MatMuls (~2 s) against a 300 ms deadline: the 504
/// comes at the deadline plus at most one node, and no CPU burns after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_heavy_compute_answers_at_its_deadline_and_burns_nothing_after() {
    let _alone = crate::ONE_AT_A_TIME.lock().await;
    let repository = tempfile::tempdir().unwrap();
    let heavy = onnx::matmul_chain(200, 1024, Some(256));
    faulty_model(
        repository.path(),
        "good",
        "instances = 1\ntimeout_ms = 300",
        &[("heavy", &heavy)],
    );
    keep(repository.path(), "heavy");
    let server = ServerProcess::spawn(repository.path(), &[]).await;
    let mut worst = Duration::ZERO;
    for _ in 0..3 {
        let body = json!({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 1], "data": [-40.0]}]});
        let (status, answer, took) = post(&server, "/v2/models/good/infer", body).await;
        assert_eq!(status, 504, "{answer}");
        worst = worst.max(took);
        let cpu = cpu_time(server.pid());
        tokio::time::sleep(Duration::from_millis(500)).await;
        let after = cpu_time(server.pid()).saturating_sub(cpu);
        eprintln!("nn heavy compute: 504 after {took:?}; CPU in the 500 ms after: {after:?}");
        // Replacing the instance compiles nothing (its template is kept): a few ms.
        assert!(
            after < Duration::from_millis(100),
            "the server burned {after:?} after the 504"
        );
    }
    assert!(worst < Duration::from_millis(300 + 150), "a 504 took {worst:?}");
    serves(&server).await;
}

/// `minilm`'s graph memory as the server counts it (`graph_bytes`).
async fn graph_bytes(server: &ServerProcess) -> u64 {
    server.stats("minilm").await["graph_bytes"].as_u64().unwrap()
}

/// Sends `rounds` rounds of `at_once` requests of `text` to `minilm`, each answered 200.
async fn embed_rounds(server: &ServerProcess, text: &str, rounds: usize, at_once: usize) {
    let body = json!({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "data": [text]}]});
    for _ in 0..rounds {
        let requests: Vec<_> = (0..at_once)
            .map(|_| {
                let (client, url, body) = (
                    server.client.clone(),
                    server.url("/v2/models/minilm/infer"),
                    body.clone(),
                );
                tokio::spawn(async move { client.post(url).json(&body).send().await.unwrap().status().as_u16() })
            })
            .collect();
        for status in common::join_all(requests).await {
            assert_eq!(status, 200);
        }
    }
}

/// A 90 MB graph's weights are held once per model version: when four instances compute
/// at once, each ONNX Runtime session they need beyond the first costs its own work
/// memory, not another copy of the weights (a session with its own copy and ONNX Runtime's
/// pre-packed form of it costs ~140 MB before its work memory; measured with the Python
/// package, whose sessions cannot share pre-packed weights).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn minilm_weights_are_held_once_however_many_sessions_compute() {
    let _alone = crate::ONE_AT_A_TIME.lock().await;
    let library = onnx::onnxruntime_library().expect("minilm needs ONNX Runtime's library");
    // Batches of one, all of one length: every session's work memory is the same, so what
    // the sessions beyond the first add is theirs alone.
    let repository = common::minilm::minilm_repository_with(
        "minilm",
        "onnxruntime",
        &[
            ("instances = 2", "instances = 4"),
            ("max_batch_size = 32", "max_batch_size = 1"),
        ],
    );
    let server = ServerProcess::spawn(
        repository.path(),
        &[
            "--onnxruntime-lib",
            library.to_str().unwrap(),
            "--model-control",
            "none",
        ],
    )
    .await;
    // Texts of ~70 word pieces: computes long enough for the instances' to overlap (each
    // overlap needs a session of its own), with little work memory.
    let text = "Sandboxed plugins share one copy of the weights. ".repeat(8);
    embed_rounds(&server, &text, 3, 1).await;
    let (one_session, counted_one) = (server.rss_kib(), graph_bytes(&server).await);
    embed_rounds(&server, &text, 20, 16).await;
    let (sessions, counted) = (server.rss_kib(), graph_bytes(&server).await);
    // Each session beyond the first is counted for the 4 MiB floor: minilm's constants are
    // all shared but a few kilobytes.
    let more = (counted - counted_one) / (4 * MIB);
    let grew_mib = sessions.saturating_sub(one_session) / 1024;
    eprintln!(
        "minilm: one session {} MiB resident; with {more} more sessions {} MiB (+{grew_mib} MiB)",
        one_session / 1024,
        sessions / 1024
    );
    assert!(
        (1..=3).contains(&more),
        "{more} more sessions ({counted_one} -> {counted} bytes counted)"
    );
    // A session holding its own copy would cost ~170 MB: the weights (85 MB), their
    // pre-packed form, and its work memory (~76 MB measured here: arena, kernels' scratch).
    assert!(grew_mib < more * 120, "{more} more sessions cost {grew_mib} MiB");
}
