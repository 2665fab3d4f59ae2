//! End to end: on-demand residency (`--residency on-demand`). Models start on standby,
//! ready and described without being loaded; the first request loads a model once for
//! every request waiting meanwhile; a broken one fails once and answers every request
//! clearly; the memory budget evicts the least recently used model with nothing in
//! flight, by what the models are measured to hold, a plugin growing after its load
//! included; idle models go back to standby; the repository API pins and unpins.
//!
//! The models are copies of the faulty test plugin (one instance each), whose code -24
//! keeps 16 MiB more of linear memory on every such item: a model grown on purpose.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common;

use common::metrics::scrape;
use common::{output_f32, TestServer};
use serde_json::Value;
use tensorplug::app::config::{ResidencyMode, ServeConfig};

/// A repository of faulty models named `names`, one instance each.
fn faulty_models(names: &[&str]) -> tempfile::TempDir {
    let repository = tempfile::tempdir().expect("temp dir");
    for name in names {
        add_model(repository.path(), name);
    }
    repository
}

fn add_model(repository: &Path, name: &str) {
    add_faulty_model(repository, name, "max_batch_size = 8", "instances = 1");
}

/// Adds a copy of the faulty plugin as `name`, with the given `[batching]` and `[limits]`.
fn add_faulty_model(repository: &Path, name: &str, batching: &str, limits: &str) {
    let dir = repository.join(name);
    std::fs::create_dir(&dir).expect("model folder");
    std::fs::copy(
        common::root().join("tests/models/faulty/predict.wasm"),
        dir.join("predict.wasm"),
    )
    .expect("build the plugins first with ./scripts/build-plugins.sh");
    std::fs::write(dir.join("model.toml"), common::faulty_config(batching, limits)).expect("model.toml");
}

/// Adds `table` (a TOML table, e.g. `[residency]\npinned = true`) to `model`'s model.toml.
fn append_to_config(repository: &Path, model: &str, table: &str) {
    let toml = repository.join(model).join("model.toml");
    let text = std::fs::read_to_string(&toml).expect("model.toml");
    std::fs::write(&toml, format!("{text}\n{table}\n")).expect("model.toml");
}

/// On-demand settings over `repository`: no budget, no idle unload, nothing protected.
fn on_demand(repository: &Path) -> ServeConfig {
    let mut config = common::serve_config(repository);
    config.residency = ResidencyMode::OnDemand;
    config.min_residency_secs = 0;
    config.idle_unload_secs = 0;
    config
}

/// Each model's row of the repository index, by name.
async fn rows(server: &TestServer) -> std::collections::BTreeMap<String, Value> {
    let index = common::index(server).await;
    index
        .as_array()
        .expect("index rows")
        .iter()
        .map(|row| (row["name"].as_str().expect("name").to_owned(), row.clone()))
        .collect()
}

async fn state(server: &TestServer, model: &str) -> String {
    rows(server).await[model]["state"].as_str().expect("state").to_owned()
}

async fn infer(server: &TestServer, model: &str, values: &[f32]) -> (u16, Value) {
    server.post_items(model, values).await
}

/// POSTs one item to `model` with a time limit of 300 ms (the V2 `timeout` parameter, in µs).
async fn infer_within_300_ms(server: &TestServer, model: &str) -> reqwest::Response {
    let mut request = common::items_request(&[1.0]);
    request["parameters"] = serde_json::json!({ "timeout": 300_000 });
    server
        .client
        .post(server.url(&format!("/v2/models/{model}/infer")))
        .json(&request)
        .send()
        .await
        .expect("POST")
}

/// Waits up to `within` for `check` to hold.
async fn eventually<F, Fut>(within: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    while started.elapsed() < within {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standby_models_are_ready_and_described_without_loading_and_load_on_their_first_request() {
    let repository = faulty_models(&["a", "b"]);
    let server = TestServer::start_with(on_demand(repository.path())).await;

    assert_eq!(server.get("/v2/health/ready").await.0, 200, "ready once indexed");
    for probe in ["/v2/models/a/ready", "/v2/models/a", "/v2/models/a/versions/1"] {
        let (status, body) = server.get(probe).await;
        assert_eq!(status, 200, "{probe}: {body}");
    }
    let (_, metadata) = server.get("/v2/models/a").await;
    assert_eq!(metadata["inputs"][0]["name"], "x", "{metadata}");
    assert_eq!(state(&server, "a").await, "STANDBY", "no probe loads a model");
    let page = scrape(&server).await;
    assert_eq!(page.value("tensorplug_models", &[("state", "standby")]), 2.0);
    assert!(
        !page.has("tensorplug_model_ready", &[("model", "a")]),
        "a model on standby has no series"
    );
    assert_eq!(page.value_or_zero("tensorplug_residency_loads_total", &[]), 0.0);

    let (status, body) = infer(&server, "a", &[1.0, 2.5]).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(output_f32(&body, "y"), vec![2.0, 5.0]);
    let rows = rows(&server).await;
    assert_eq!(rows["a"]["state"], "READY", "{rows:?}");
    assert!(rows["a"]["memory_bytes"].as_u64().unwrap() > 1 << 20, "{rows:?}");
    assert_eq!(rows["b"]["state"], "STANDBY");
    let page = scrape(&server).await;
    assert_eq!(
        page.value(
            "tensorplug_residency_loads_total",
            &[("trigger", "request"), ("outcome", "ready")]
        ),
        1.0
    );
    assert_eq!(
        page.histogram_count("tensorplug_cold_start_seconds", &[("phase", "total")]),
        1.0
    );
    assert!(page.value("tensorplug_resident_memory_bytes", &[]) > 0.0);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_first_request_arriving_during_the_load_waits_for_that_one_load() {
    let repository = faulty_models(&["a"]);
    let server = TestServer::start_with(on_demand(repository.path())).await;
    let tasks: Vec<_> = (0..64)
        .map(|k| {
            let (client, url) = (
                server.client.clone(),
                server.url(common::FAULTY_INFER.replace("faulty", "a").as_str()),
            );
            tokio::spawn(async move {
                let response = client
                    .post(url)
                    .json(&common::items_request(&[k as f32]))
                    .send()
                    .await
                    .expect("POST");
                (
                    response.status().as_u16(),
                    response.json::<Value>().await.expect("JSON"),
                )
            })
        })
        .collect();
    for (k, (status, body)) in common::join_all(tasks).await.into_iter().enumerate() {
        assert_eq!(status, 200, "{body}");
        assert_eq!(output_f32(&body, "y"), vec![2.0 * k as f32]);
    }
    let page = scrape(&server).await;
    assert_eq!(
        page.value("tensorplug_residency_loads_total", &[("trigger", "request")]),
        1.0
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_model_fails_one_load_answers_every_request_clearly_and_comes_back_when_fixed() {
    let repository = faulty_models(&["good", "broken"]);
    std::fs::write(
        repository.path().join("broken/predict.wasm"),
        b"\0asm\x0d\0\x01\0garbage",
    )
    .unwrap();
    let server = TestServer::start_with(on_demand(repository.path())).await;
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (client, url) = (server.client.clone(), server.url("/v2/models/broken/infer"));
            tokio::spawn(async move {
                let mut answers = Vec::new();
                for _ in 0..125 {
                    let response = client
                        .post(&url)
                        .json(&common::items_request(&[1.0]))
                        .send()
                        .await
                        .expect("POST");
                    answers.push((response.status().as_u16(), response.text().await.expect("body")));
                }
                answers
            })
        })
        .collect();
    let answers: Vec<(u16, String)> = common::join_all(tasks).await.into_iter().flatten().collect();
    assert_eq!(answers.len(), 1000);
    for (status, body) in &answers {
        assert_eq!(*status, 500, "{body}");
        assert!(body.contains("broken") && body.contains("predict.wasm"), "{body}");
    }
    let page = scrape(&server).await;
    assert_eq!(
        page.value("tensorplug_residency_loads_total", &[("outcome", "failed")]),
        1.0,
        "one load, no recompile per request"
    );
    assert_eq!(
        server.get("/v2/health/ready").await.0,
        200,
        "one tenant's broken model is its own"
    );
    assert_eq!(infer(&server, "good", &[3.0]).await.0, 200);

    // Fixed: the watcher indexes the folder again, and the next request loads it.
    std::fs::copy(
        common::root().join("tests/models/faulty/predict.wasm"),
        repository.path().join("broken/predict.wasm"),
    )
    .unwrap();
    assert!(
        eventually(Duration::from_secs(20), || async {
            infer(&server, "broken", &[1.0]).await.0 == 200
        })
        .await,
        "the fixed model never answered: {:?}",
        rows(&server).await
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_larger_than_the_whole_budget_fails_once_naming_the_budget_and_never_loads() {
    let repository = faulty_models(&["big"]);
    let mut config = on_demand(repository.path());
    // The faulty model's files declare several MiB of linear memory per instance.
    config.memory_budget_mib = Some(1);
    let server = TestServer::start_with(config).await;
    for _ in 0..20 {
        let (status, body) = infer(&server, "big", &[1.0]).await;
        assert_eq!(status, 500, "{body}");
        let error = body["error"].as_str().unwrap_or_default();
        assert!(
            error.contains("more than the whole memory budget of 1 MiB (--memory-budget-mib)"),
            "{body}"
        );
    }
    let row = rows(&server).await["big"].clone();
    assert_eq!(row["state"], "UNAVAILABLE", "{row}");
    let page = scrape(&server).await;
    assert_eq!(
        page.value_or_zero("tensorplug_residency_loads_total", &[]),
        0.0,
        "sized once, never loaded"
    );
    assert_eq!(server.get("/v2/health/ready").await.0, 200, "the node stays ready");
    server.stop().await;
}

/// A server on demand over three models of ~17 MiB each once loaded (16 kept by their
/// init) under a budget of 40 MiB: two fit, not three.
async fn two_of_three_fit(models: [&str; 3]) -> (tempfile::TempDir, TestServer) {
    let repository = faulty_models(&models);
    for model in models {
        append_to_config(repository.path(), model, "[parameters]\nkeep_mib = 16");
    }
    let mut config = on_demand(repository.path());
    config.memory_budget_mib = Some(40);
    let server = TestServer::start_with(config).await;
    (repository, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_budget_evicts_the_least_recently_used_model_by_what_it_measures_and_it_comes_back() {
    let (_repository, server) = two_of_three_fit(["a", "b", "c"]).await;
    for model in ["a", "b"] {
        assert_eq!(infer(&server, model, &[1.0]).await.0, 200);
    }
    let held = rows(&server).await;
    let (a, b) = (
        held["a"]["memory_bytes"].as_u64().unwrap(),
        held["b"]["memory_bytes"].as_u64().unwrap(),
    );
    assert!(a > 16 << 20 && b > 16 << 20 && a + b < 40 << 20, "measured: {a} {b}");

    // c, never loaded, reserves its files' size; measured once loaded, the three pass
    // the budget: a, least recently used, goes.
    assert_eq!(infer(&server, "c", &[1.0]).await.0, 200);
    let after = rows(&server).await;
    let states = |rows: &std::collections::BTreeMap<String, Value>| {
        ["a", "b", "c"].map(|m| rows[m]["state"].as_str().unwrap().to_owned())
    };
    assert_eq!(states(&after), ["STANDBY", "READY", "READY"], "{after:?}");
    let page = scrape(&server).await;
    assert_eq!(
        page.value("tensorplug_residency_evictions_total", &[("cause", "budget")]),
        1.0
    );
    let resident = page.value("tensorplug_resident_memory_bytes", &[]);
    assert!(resident <= (40 << 20) as f64, "resident {resident} within the budget");
    assert_eq!(page.value("tensorplug_memory_budget_bytes", &[]), (40 << 20) as f64);

    // a comes back on its next request, answering as before: it is known to hold ~17
    // MiB, so its load makes that room first, evicting b, now the least recently used.
    let (status, body) = infer(&server, "a", &[4.0]).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(output_f32(&body, "y"), vec![8.0]);
    assert_eq!(states(&rows(&server).await), ["READY", "STANDBY", "READY"]);
    let page = scrape(&server).await;
    assert_eq!(
        page.value("tensorplug_residency_evictions_total", &[("cause", "budget")]),
        2.0
    );
    assert!(page.value("tensorplug_resident_memory_bytes", &[]) <= (40 << 20) as f64);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_asked_for_again_outlives_a_more_recent_one_off() {
    let (_repository, server) = two_of_three_fit(["used", "once", "next"]).await;
    // `used` is asked for again after its load; `once`, later, only by its loading request.
    for model in ["used", "used", "once"] {
        assert_eq!(infer(&server, model, &[1.0]).await.0, 200);
    }
    // Nothing is protected (no minimum residency): `used` is the least recently used, yet
    // the one-off goes first.
    assert_eq!(infer(&server, "next", &[1.0]).await.0, 200);
    let after = rows(&server).await;
    let states = ["used", "once", "next"].map(|m| after[m]["state"].as_str().unwrap().to_owned());
    assert_eq!(states, ["READY", "STANDBY", "READY"], "{after:?}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_that_grows_past_the_budget_sends_its_idle_neighbours_away() {
    let repository = faulty_models(&["a", "b", "grower"]);
    let mut config = on_demand(repository.path());
    config.memory_budget_mib = Some(40);
    let server = TestServer::start_with(config).await;
    for model in ["a", "b", "grower"] {
        assert_eq!(infer(&server, model, &[1.0]).await.0, 200);
    }
    // 16 MiB more a call, measured as it grows: past the budget by the third.
    for _ in 0..3 {
        assert_eq!(infer(&server, "grower", &[-24.0]).await.0, 200);
    }
    assert!(
        eventually(Duration::from_secs(5), || async {
            let rows = rows(&server).await;
            rows["a"]["state"] == "STANDBY" && rows["b"]["state"] == "STANDBY"
        })
        .await,
        "{:?}",
        rows(&server).await
    );
    let page = scrape(&server).await;
    assert!(page.value("tensorplug_residency_evictions_total", &[("cause", "budget")]) >= 2.0);
    // Idle itself, the grower goes too: what stays resident is within the budget.
    assert!(
        eventually(Duration::from_secs(5), || async {
            scrape(&server).await.value("tensorplug_resident_memory_bytes", &[]) <= (40 << 20) as f64
        })
        .await
    );
    assert_eq!(infer(&server, "a", &[2.0]).await.0, 200, "a comes back");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_nothing_to_evict_a_grower_meets_its_own_cap_and_a_cold_load_gets_503_in_its_deadline() {
    let repository = faulty_models(&["a", "grower", "cold"]);
    for model in ["a", "grower"] {
        // A load of 500 ms (its init sleeps) is worth protecting: 20 loads' time, 10 s.
        append_to_config(repository.path(), model, "[parameters]\nsleep_init_ms = 500");
    }
    let mut config = on_demand(repository.path());
    config.memory_budget_mib = Some(40);
    // Everything used within a minute stays, for as long as 20 of its loads take: nothing
    // can be evicted during the test.
    config.min_residency_secs = 60;
    config.min_residency_loads = 20;
    let server = TestServer::start_with(config).await;
    // Asked for twice, a is in use (a model only its loading request asked for is not
    // protected).
    assert_eq!(infer(&server, "a", &[1.0]).await.0, 200);
    assert_eq!(infer(&server, "a", &[1.0]).await.0, 200);
    let mut statuses = Vec::new();
    for _ in 0..7 {
        statuses.push(infer(&server, "grower", &[-24.0]).await.0);
    }
    // 16 MiB a call from ~1 MiB: the fourth passes limits.memory_mib (64) and traps; its
    // instance is replaced (its memory given back) and the next ones are answered, the
    // new instance growing to ~49 MiB again: over the budget.
    assert_eq!(
        statuses,
        [200, 200, 200, 500, 200, 200, 200],
        "the cap stops the grower"
    );
    let held = rows(&server).await["grower"]["memory_bytes"].as_u64().unwrap();
    assert!(held < 64 << 20, "{held}");

    // Over the budget, nothing evictable: a cold model's first request waits within its
    // own deadline, then 503 with Retry-After; counted.
    let started = Instant::now();
    let response = infer_within_300_ms(&server, "cold").await;
    let waited = started.elapsed();
    assert_eq!(response.status(), 503);
    assert_eq!(response.headers()["retry-after"], "1");
    let body = response.text().await.unwrap();
    assert!(body.contains("memory budget"), "{body}");
    assert!(
        waited >= Duration::from_millis(250) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    let page = scrape(&server).await;
    assert!(page.value("tensorplug_residency_unavailable_total", &[]) >= 1.0);
    assert!(page.value("tensorplug_residency_budget_waits_total", &[]) >= 1.0);
    assert!(
        eventually(Duration::from_secs(2), || async {
            state(&server, "cold").await == "STANDBY"
        })
        .await,
        "not loaded over the budget, and its load given up once nobody waits"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_evicted_as_its_requests_arrive_is_loaded_again_never_lost() {
    let repository = faulty_models(&["a", "b"]);
    let mut config = on_demand(repository.path());
    // Room for one model (1.3 MiB each, measured) at a time: every request for the other
    // one evicts it as soon as nothing holds it, while requests for it keep arriving.
    config.memory_budget_mib = Some(2);
    let server = TestServer::start_with(config).await;
    let tasks: Vec<_> = [["a", "b"], ["b", "a"]]
        .into_iter()
        .map(|order| {
            let (client, base) = (server.client.clone(), server.url("/v2/models/"));
            tokio::spawn(async move {
                let mut statuses = Vec::new();
                let until = Instant::now() + Duration::from_secs(3);
                for k in 0.. {
                    if Instant::now() >= until {
                        break;
                    }
                    let response = client
                        .post(format!("{base}{}/infer", order[k % 2]))
                        .json(&common::items_request(&[k as f32]))
                        .send()
                        .await
                        .expect("POST");
                    let status = response.status().as_u16();
                    let body: Value = response.json().await.expect("JSON");
                    if status == 200 {
                        assert_eq!(output_f32(&body, "y"), vec![2.0 * k as f32]);
                    } else {
                        eprintln!("{status}: {body}");
                    }
                    statuses.push(status);
                }
                statuses
            })
        })
        .collect();
    let statuses: Vec<u16> = common::join_all(tasks).await.into_iter().flatten().collect();
    let answered = statuses.iter().filter(|s| **s == 200).count();
    assert_eq!(answered, statuses.len(), "every request answered: {statuses:?}");
    let page = scrape(&server).await;
    let evictions = page.value("tensorplug_residency_evictions_total", &[("cause", "budget")]);
    eprintln!("{} requests, {evictions} evictions", statuses.len());
    assert!(evictions >= 10.0, "{evictions}");
    assert!(page.value("tensorplug_resident_memory_bytes", &[]) <= (2 << 20) as f64);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_model_goes_back_to_standby_and_a_pinned_one_stays() {
    let repository = faulty_models(&["idle", "pinned"]);
    append_to_config(repository.path(), "pinned", "[residency]\npinned = true");
    let mut config = on_demand(repository.path());
    config.idle_unload_secs = 1;
    let server = TestServer::start_with(config).await;
    assert_eq!(state(&server, "pinned").await, "READY", "pinned: loaded at start");
    assert_eq!(infer(&server, "idle", &[1.0]).await.0, 200);
    assert_eq!(state(&server, "idle").await, "READY");
    assert!(
        eventually(Duration::from_secs(5), || async {
            state(&server, "idle").await == "STANDBY"
        })
        .await,
        "never unloaded"
    );
    assert_eq!(state(&server, "pinned").await, "READY");
    let page = scrape(&server).await;
    assert_eq!(
        page.value("tensorplug_residency_evictions_total", &[("cause", "idle")]),
        1.0
    );
    assert_eq!(
        page.value("tensorplug_residency_loads_total", &[("trigger", "startup")]),
        1.0
    );
    // Still known and ready; its next request loads it again.
    assert_eq!(server.get("/v2/models/idle/ready").await.0, 200);
    assert_eq!(infer(&server, "idle", &[1.0]).await.0, 200);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_repository_api_pins_a_model_resident_and_unload_sends_it_to_standby() {
    let repository = faulty_models(&["m"]);
    let mut config = on_demand(repository.path());
    config.idle_unload_secs = 1;
    config.admin_token = Some("token".into());
    let server = TestServer::start_with(config).await;
    let post = |path: &'static str| server.client.post(server.url(path)).bearer_auth("token").send();
    assert_eq!(post("/v2/repository/models/m/load").await.unwrap().status(), 200);
    let index: Value = post("/v2/repository/index").await.unwrap().json().await.unwrap();
    assert_eq!(index[0]["state"], "READY");
    assert_eq!(index[0]["pinned"], true);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let index: Value = post("/v2/repository/index").await.unwrap().json().await.unwrap();
    assert_eq!(index[0]["state"], "READY", "pinned: never idle-unloaded");
    assert_eq!(post("/v2/repository/models/m/unload").await.unwrap().status(), 200);
    let index: Value = post("/v2/repository/index").await.unwrap().json().await.unwrap();
    assert_eq!(index[0]["state"], "STANDBY", "{index}");
    assert_eq!(infer(&server, "m", &[1.0]).await.0, 200);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_request_over_grpc_loads_its_model_too() {
    let repository = faulty_models(&["a"]);
    let server = TestServer::start_with_grpc(on_demand(repository.path())).await;
    let mut client = server.grpc_client().await;
    let request = tensorplug::protocol::grpc::proto::ModelInferRequest {
        model_name: "a".into(),
        ..common::grpc::faulty_request(&[1.5])
    };
    let answer = client.model_infer(request).await.expect("answered").into_inner();
    let y: Vec<f32> = answer.raw_output_contents[0]
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    assert_eq!(y, vec![3.0]);
    assert_eq!(state(&server, "a").await, "READY");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_filled_by_tensorplug_compile_serves_first_requests_without_compiling() {
    let (repository, _) = two_tenants();
    let cache = tempfile::tempdir().unwrap();
    let output = compile_into(repository.path(), cache.path());
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{printed}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        printed.contains("ok     a: predict") && printed.contains("ok     b: predict"),
        "{printed}"
    );
    assert!(printed.contains("2 models, 2 stages compiled"), "{printed}");

    let server = serve_each_once(repository.path(), cache.path()).await;
    let page = common::metrics::scrape_process(&server).await;
    assert_eq!(
        page.value(
            "tensorplug_residency_loads_total",
            &[("trigger", "request"), ("compiled", "false"), ("outcome", "ready")]
        ),
        2.0,
        "{}",
        page.text
    );
    let ready = server
        .wait_for_log("b ready", |line| {
            line.contains("model ready") && (line.contains("model=b ") || line.contains("model=\"b\""))
        })
        .await;
    assert!(ready.contains("cached: true"), "{ready}");

    // A broken stage makes `compile` fail, naming it.
    std::fs::write(repository.path().join("a/predict.wasm"), b"not wasm").unwrap();
    let output = compile_into(repository.path(), cache.path());
    let printed = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{printed}");
    assert!(printed.contains("error  a: predict"), "{printed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stages_compiled_ahead_of_time_are_mapped_and_a_damaged_one_is_compiled_instead() {
    let (repository, wasm) = two_tenants();
    let cache = tempfile::tempdir().unwrap();
    let status = compile_into(repository.path(), cache.path()).status;
    assert!(status.success());
    let mut mapped: Vec<_> = std::fs::read_dir(cache.path().join("precompiled"))
        .expect("a folder of compiled stages")
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.is_file())
        .collect();
    mapped.sort();
    assert_eq!(mapped.len(), 2, "{mapped:?}");
    assert!(mapped.iter().all(|file| file.extension().is_some_and(|e| e == "cwasm")));
    // Beside them, what each stage file's digest was, so that a load need not read it.
    assert_eq!(
        std::fs::read_dir(cache.path().join("precompiled/files"))
            .unwrap()
            .count(),
        2
    );

    // One of them damaged (cut in half, as a full disk might leave it): never mapped.
    let b_digest = sha256_hex(&std::fs::read(&wasm).unwrap());
    let damaged = mapped
        .iter()
        .find(|file| file.file_name().unwrap().to_string_lossy().starts_with(&b_digest))
        .expect("b's stage");
    let compiled = std::fs::read(damaged).unwrap();
    std::fs::write(damaged, &compiled[..compiled.len() / 2]).unwrap();

    let server = serve_each_once(repository.path(), cache.path()).await;
    let page = common::metrics::scrape_process(&server).await;
    let loads = |compiled| {
        page.value_or_zero(
            "tensorplug_residency_loads_total",
            &[("trigger", "request"), ("compiled", compiled), ("outcome", "ready")],
        )
    };
    assert_eq!((loads("false"), loads("true")), (1.0, 1.0), "{}", page.text);
    server
        .wait_for_log("the damaged stage named", |line| {
            line.contains("precompiled stage not used") && line.contains(&b_digest)
        })
        .await;
}

/// Models `a` and `b` whose stages differ in bytes (as two tenants' would), and `b`'s stage.
fn two_tenants() -> (tempfile::TempDir, std::path::PathBuf) {
    let repository = faulty_models(&["a", "b"]);
    let wasm = repository.path().join("b/predict.wasm");
    let mut bytes = std::fs::read(&wasm).unwrap();
    bytes.extend_from_slice(b"\x00\x09\x08tenant-b");
    std::fs::write(&wasm, bytes).unwrap();
    (repository, wasm)
}

/// `tensorplug compile REPOSITORY --cache-dir CACHE`, run to its end.
fn compile_into(repository: &Path, cache: &Path) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_tensorplug"))
        .arg("compile")
        .arg(repository)
        .arg("--cache-dir")
        .arg(cache)
        .output()
        .expect("tensorplug compile")
}

/// The real server on demand over `repository` with the compile cache `cache`, after a
/// first request (answered 200) to `a` and to `b`.
async fn serve_each_once(repository: &Path, cache: &Path) -> common::process::ServerProcess {
    let cache_dir = cache.to_str().unwrap();
    let server =
        common::process::ServerProcess::spawn(repository, &["--residency", "on-demand", "--cache-dir", cache_dir])
            .await;
    for model in ["a", "b"] {
        let response = server
            .client
            .post(server.url(&format!("/v2/models/{model}/infer")))
            .json(&common::items_request(&[1.0]))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{model}");
    }
    server
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_models_on_standby_and_two_hundred_resident_keep_a_scrape_under_a_megabyte() {
    let repository = tempfile::tempdir().expect("temp dir");
    let plugin = common::root().join("tests/models/faulty/predict.wasm");
    let toml = common::faulty_config("max_batch_size = 8", "instances = 1");
    for k in 0..10_000 {
        let dir = repository.path().join(format!("m{k}"));
        std::fs::create_dir(&dir).unwrap();
        std::fs::hard_link(&plugin, dir.join("predict.wasm")).unwrap();
        std::fs::write(dir.join("model.toml"), &toml).unwrap();
    }
    let started = Instant::now();
    let server = TestServer::spawn(on_demand(repository.path()), false).await;
    // While the repository is indexed, a model not indexed yet is not ready: 503, not 404.
    let early = loop {
        match server
            .client
            .post(server.url("/v2/models/m9999/infer"))
            .json(&common::items_request(&[1.0]))
            .send()
            .await
        {
            Ok(response) => break response.status().as_u16(),
            Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    };
    assert!([200, 503].contains(&early), "{early}");
    server.wait_ready().await;
    eprintln!(
        "10,000 models indexed and ready in {:?} (the first request: {early})",
        started.elapsed()
    );
    let page = scrape(&server).await;
    assert_eq!(page.value("tensorplug_models", &[("state", "standby")]), 10_000.0);
    assert!(
        page.text.len() < 64 << 10,
        "standby models have no series: {} bytes",
        page.text.len()
    );

    let tasks: Vec<_> = (0..4)
        .map(|part| {
            let (client, base) = (server.client.clone(), server.url("/v2/models/"));
            tokio::spawn(async move {
                for k in (part..200).step_by(4) {
                    let response = client
                        .post(format!("{base}m{k}/infer"))
                        .json(&common::items_request(&[1.0]))
                        .send()
                        .await
                        .expect("POST");
                    assert_eq!(response.status(), 200);
                }
            })
        })
        .collect();
    common::join_all(tasks).await;
    let page = scrape(&server).await;
    assert_eq!(page.value("tensorplug_models", &[("state", "ready")]), 200.0);
    eprintln!("a scrape with 200 of 10,000 models resident: {} bytes", page.text.len());
    assert!(page.text.len() < 1 << 20, "{} bytes", page.text.len());
    // Their latencies are on the page, server-wide.
    assert_eq!(
        page.histogram_count(
            "tensorplug_all_models_request_duration_seconds",
            &[("protocol", "rest")]
        ),
        200.0
    );
    assert!(!page.has("tensorplug_request_duration_seconds_count", &[("model", "m0")]));
    assert!(
        !page.has("tensorplug_model_loads_total", &[("model", "m0")]),
        "loads are counted server-wide on demand (tensorplug_residency_loads_total)"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_asks_for_histograms_of_its_own_on_demand() {
    let repository = faulty_models(&["own", "plain"]);
    append_to_config(repository.path(), "own", "[metrics]\nhistograms = true");
    let server = TestServer::start_with(on_demand(repository.path())).await;
    for model in ["own", "plain"] {
        assert_eq!(infer(&server, model, &[1.0]).await.0, 200);
    }
    let page = scrape(&server).await;
    let stage = |model| {
        page.has(
            "tensorplug_stage_seconds_count",
            &[("model", model), ("stage", "predict")],
        )
    };
    assert!(stage("own") && !stage("plain"));
    assert_eq!(
        page.value(
            "tensorplug_requests_total",
            &[("model", "plain"), ("protocol", "rest"), ("status", "200")]
        ),
        1.0,
        "counters stay per model"
    );
    assert_eq!(
        page.histogram_count("tensorplug_all_models_stage_seconds", &[("stage", "predict")]),
        2.0
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fast_loading_model_is_protected_for_a_few_of_its_loads_not_the_whole_minimum() {
    let repository = faulty_models(&["a", "b"]);
    let mut config = on_demand(repository.path());
    config.memory_budget_mib = Some(2);
    config.min_residency_secs = 60;
    let server = TestServer::start_with(config).await;
    assert_eq!(infer(&server, "a", &[1.0]).await.0, 200);
    assert_eq!(infer(&server, "a", &[1.0]).await.0, 200);
    // b fits its files' size in, and measured it passes the budget: a, loaded in
    // milliseconds and in use, goes once 4 of its loads' time have passed, not after a
    // minute.
    let (status, body) = infer(&server, "b", &[1.0]).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        eventually(Duration::from_secs(10), || async {
            state(&server, "a").await == "STANDBY"
        })
        .await,
        "{:?}",
        rows(&server).await
    );
    assert!(scrape(&server).await.value("tensorplug_resident_memory_bytes", &[]) <= (2 << 20) as f64);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_only_its_loading_request_asked_for_makes_room_at_once_and_one_asked_for_again_is_kept() {
    let repository = faulty_models(&["a", "b"]);
    let mut config = on_demand(repository.path());
    // Room for one model at a time; a model in use is kept for the whole minute.
    config.memory_budget_mib = Some(2);
    config.min_residency_secs = 60;
    config.min_residency_loads = 1000;
    let server = TestServer::start_with(config).await;
    assert_eq!(infer(&server, "a", &[1.0]).await.0, 200);
    // a was asked for once, by the request that loaded it: b's load evicts it at once.
    let started = Instant::now();
    let (status, body) = infer(&server, "b", &[1.0]).await;
    assert_eq!(status, 200, "{body}");
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    assert_eq!(state(&server, "a").await, "STANDBY");
    // b asked for again is in use: a's next load finds nothing it may evict, waits
    // within its request's 300 ms and gets 503.
    assert_eq!(infer(&server, "b", &[2.0]).await.0, 200);
    let response = infer_within_300_ms(&server, "a").await;
    assert_eq!(response.status(), 503);
    assert_eq!(state(&server, "b").await, "READY");
    let page = scrape(&server).await;
    assert_eq!(
        page.value("tensorplug_residency_evictions_total", &[("cause", "budget")]),
        1.0
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_with_models_made_resident_on_demand_drains_at_once() {
    let repository = faulty_models(&["a", "b"]);
    let server = TestServer::start_with(on_demand(repository.path())).await;
    for model in ["a", "b", "a"] {
        assert_eq!(infer(&server, model, &[1.0]).await.0, 200);
    }
    // Nothing in flight: the drain lets the models go at once (nothing the repository
    // keeps about resident models may hold them until the 30 s grace ends).
    let started = Instant::now();
    server.stop().await;
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
}

/// A model of `instances` instances at most whose calls are cut at 400 ms (its code -2
/// loops until then), one item per batch: each slow request holds an instance.
fn elastic_model(repository: &Path, name: &str, instances: usize, extra_limits: &str) {
    let limits = format!("instances = {instances}\ntimeout_ms = 400\n{extra_limits}");
    // A queue delay keeps these off the idle path, whose runtime threads are shared by
    // every test server of this process: its slow calls would close it to them.
    add_faulty_model(
        repository,
        name,
        "max_batch_size = 1\nmax_queue_delay_us = 100",
        &limits,
    );
}

/// Sends `count` slow requests at once to `model` and returns the most instances it had
/// meanwhile (sampled every 20 ms).
async fn most_instances_under_slow_requests(server: &TestServer, model: &str, count: usize) -> u64 {
    let url = server.url(&format!("/v2/models/{model}/infer"));
    let requests: Vec<_> = (0..count)
        .map(|_| {
            let (client, url) = (server.client.clone(), url.clone());
            tokio::spawn(async move {
                let response = client
                    .post(url)
                    .json(&common::items_request(&[-2.0]))
                    .send()
                    .await
                    .expect("an answer");
                response.status().as_u16()
            })
        })
        .collect();
    let mut most = 0;
    while !requests.iter().all(|r| r.is_finished()) {
        most = most.max(
            common::stats(server, model).await["instances_live"]
                .as_u64()
                .unwrap_or(0),
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for status in common::join_all(requests).await {
        // Each slow item is cut at its call limit: a per-item error, never a lost request.
        assert!(status == 500 || status == 504, "{status}");
    }
    most
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_follow_the_load_up_to_the_ceiling_and_back_down_to_the_floor() {
    let repository = tempfile::tempdir().expect("temp dir");
    elastic_model(repository.path(), "elastic", 3, "");
    elastic_model(repository.path(), "to-zero", 2, "min_instances = 0");
    let mut config = on_demand(repository.path());
    config.instance_idle_secs = 1;
    let server = TestServer::start_with(config).await;

    // On demand a model starts with one instance (a quicker first answer, less held).
    assert_eq!(infer(&server, "elastic", &[1.0]).await.0, 200);
    assert_eq!(common::stats(&server, "elastic").await["instances_live"], 1);
    // Requests waiting for an instance add one at a time, up to the ceiling, no further.
    let most = most_instances_under_slow_requests(&server, "elastic", 9).await;
    assert_eq!(most, 3, "grew to its ceiling of 3");
    // Idle past the idle time, it goes back down to its floor of one.
    assert!(
        eventually(Duration::from_secs(10), || async {
            common::stats(&server, "elastic").await["instances_live"] == 1
        })
        .await,
        "{}",
        common::stats(&server, "elastic").await
    );

    assert_eq!(rows(&server).await["elastic"]["instances"], 1, "the index says so too");

    // A floor of zero: idle, the model gives up every instance, stays resident and
    // ready, and its next request makes one again.
    assert_eq!(infer(&server, "to-zero", &[1.0]).await.0, 200);
    assert!(
        eventually(Duration::from_secs(10), || async {
            common::stats(&server, "to-zero").await["instances_live"] == 0
        })
        .await
    );
    assert_eq!(state(&server, "to-zero").await, "READY");
    let (status, _) = server.get("/v2/models/to-zero/ready").await;
    assert_eq!(status, 200);
    let (status, body) = infer(&server, "to-zero", &[2.0]).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(output_f32(&body, "y"), vec![4.0]);
    assert_eq!(common::stats(&server, "to-zero").await["instances_live"], 1);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_is_added_only_if_the_budget_has_room_for_it() {
    // One faulty instance holds ~1.1 MiB (its memories and table) beside ~0.6 MiB of code:
    // a 3 MiB budget has room for a second instance, not a third.
    let repository = tempfile::tempdir().expect("temp dir");
    elastic_model(repository.path(), "elastic", 4, "");
    let mut config = on_demand(repository.path());
    config.memory_budget_mib = Some(3);
    let server = TestServer::start_with(config).await;
    assert_eq!(infer(&server, "elastic", &[1.0]).await.0, 200);
    let most = most_instances_under_slow_requests(&server, "elastic", 8).await;
    assert_eq!(most, 2, "the budget held it to two instances of four");
    let page = scrape(&server).await;
    assert!(page.value("tensorplug_resident_memory_bytes", &[]) <= (3 << 20) as f64);
    assert_eq!(infer(&server, "elastic", &[1.0]).await.0, 200);
    server.stop().await;
}

/// Threads of process `pid` whose names start with `prefix` (of the 15 bytes a thread
/// name keeps).
fn threads_named(pid: u32, prefix: &str) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("the server's threads")
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with(prefix))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instance_threads_start_only_when_batches_need_them_and_never_past_the_instances() {
    // A server of its own: its idle path is shared with no other test's models.
    let repository = tempfile::tempdir().expect("temp dir");
    add_faulty_model(
        repository.path(),
        "lazy",
        "max_batch_size = 1",
        "instances = 3\ntimeout_ms = 400",
    );
    let server = common::process::ServerProcess::spawn(
        repository.path(),
        &["--residency", "on-demand", "--memory-budget-mib", "256"],
    )
    .await;
    let client = reqwest::Client::new();
    let infer = server.url("/v2/models/lazy/infer");

    // One request at a time: each runs on the idle path, and no instance thread starts.
    for value in 1..=5 {
        let response = client
            .post(&infer)
            .json(&common::items_request(&[value as f32]))
            .send()
            .await
            .expect("an answer");
        assert_eq!(response.status(), 200);
    }
    assert_eq!(
        threads_named(server.pid(), "lazy#"),
        0,
        "answered on the idle path, yet instance threads were started"
    );

    // Nine slow requests at once queue for the batcher: its jobs start threads, one per
    // instance at most.
    let requests: Vec<_> = (0..9)
        .map(|_| {
            let (client, url) = (client.clone(), infer.clone());
            tokio::spawn(async move {
                let body = common::items_request(&[-2.0]);
                client
                    .post(url)
                    .json(&body)
                    .send()
                    .await
                    .expect("an answer")
                    .status()
                    .as_u16()
            })
        })
        .collect();
    for status in common::join_all(requests).await {
        assert!(status == 500 || status == 504, "{status}");
    }
    let started = threads_named(server.pid(), "lazy#");
    assert!(
        (1..=3).contains(&started),
        "{started} instance threads for a model of at most 3 instances"
    );
    let stats = server.stats("lazy").await;
    assert!(stats["instances_live"].as_u64().unwrap_or(0) <= 3, "{stats}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_model_answers_at_once_while_every_load_slot_is_held_by_slow_cold_loads() {
    // A server of its own: its loader threads are held for seconds.
    const COLD: usize = 6;
    const INIT_MS: u64 = 1_500;
    let repository = tempfile::tempdir().expect("temp dir");
    add_model(repository.path(), "warm");
    for k in 0..COLD {
        let name = format!("cold{k}");
        add_model(repository.path(), &name);
        append_to_config(
            repository.path(),
            &name,
            &format!("[parameters]\nsleep_init_ms = {INIT_MS}"),
        );
    }
    let server = common::process::ServerProcess::spawn(
        repository.path(),
        &["--residency", "on-demand", "--memory-budget-mib", "256"],
    )
    .await;
    let client = reqwest::Client::new();
    let post = |model: &str, value: f32| {
        client
            .post(server.url(&format!("/v2/models/{model}/infer")))
            .json(&common::items_request(&[value]))
            .send()
    };
    assert_eq!(post("warm", 1.0).await.expect("an answer").status(), 200);

    // A storm of first requests whose loads each sleep in init: more than the loads that
    // run at once, so every load slot (and loader thread they use) is held for seconds.
    let storm: Vec<_> = (0..COLD)
        .map(|k| tokio::spawn(post(&format!("cold{k}"), 1.0)))
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut slowest = Duration::ZERO;
    for value in 0..20 {
        let started = Instant::now();
        let response = post("warm", value as f32).await.expect("an answer");
        assert_eq!(response.status(), 200);
        slowest = slowest.max(started.elapsed());
    }
    // A warm request that waited for any load would take a load's INIT_MS.
    assert!(
        slowest < Duration::from_millis(INIT_MS / 2),
        "the warm model's slowest answer took {slowest:?} during the storm"
    );
    // Only the loads that have their turn (one per core, up to four) have begun and hold
    // room in the budget, which shows beside what is resident; the others wait for their
    // turn, reserving nothing (they once all reserved while queued, keeping a third of a
    // budget empty under load), and the index says so.
    let index = server.index().await;
    let waiting_for = |row: &&Value| row["state"] == "LOADING" && row["reason"] == "waiting for its turn to load";
    let rows = index.as_array().expect("index rows");
    let queued = rows.iter().filter(waiting_for).count();
    let begun = rows
        .iter()
        .filter(|row| row["state"] == "LOADING" && row.get("reason").is_none())
        .count();
    let turns = std::thread::available_parallelism().map_or(2, |n| n.get().clamp(1, 4));
    assert!(
        begun > 0 && begun <= turns,
        "{begun} loads begun, {turns} turns: {index}"
    );
    assert!(queued > 0, "{index}");
    // `/metrics` counts them as the index does (once, every one on standby).
    let page = common::metrics::scrape_process(&server).await;
    assert!(page.value("tensorplug_models", &[("state", "loading")]) > 0.0);
    assert!(page.value("tensorplug_reserved_memory_bytes", &[]) > 0.0);
    for answer in common::join_all(storm).await {
        assert_eq!(answer.expect("an answer").status(), 200);
    }
    let page = common::metrics::scrape_process(&server).await;
    assert_eq!(page.value("tensorplug_reserved_memory_bytes", &[]), 0.0);
    assert_eq!(page.value("tensorplug_releasing_memory_bytes", &[]), 0.0);
}
