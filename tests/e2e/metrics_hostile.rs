//! Plugin metrics written to hurt `/metrics` (faults -30..-37 of the faulty plugin):
//! label values that would forge lines, names that clash once the format's suffixes are
//! added (within a model, across models, with the host's), and a flood up to the byte
//! cap. After each, the page is read with a strict OpenMetrics parser (prometheus_client's,
//! in Python: `tests/conformance/openmetrics_strict.py`), and another model's series must
//! be exactly what they were.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::common::python::{python, run_bounded, shown};
use crate::common::{self, TestServer};

/// The per-model cap on what plugin metrics add to the page (docs/limits.md).
const BYTES_PER_MODEL: usize = 1 << 20;

/// A repository holding the digits example and two copies of the faulty plugin.
fn repository() -> tempfile::TempDir {
    let repository = common::faulty_repository(&common::faulty_config("max_batch_size = 1", "instances = 1"));
    let faulty2 = repository.path().join("faulty2");
    std::fs::create_dir(&faulty2).expect("model folder");
    for file in ["predict.wasm", "model.toml"] {
        std::fs::copy(repository.path().join("faulty").join(file), faulty2.join(file)).expect("copy");
    }
    let digits = repository.path().join("digits");
    std::fs::create_dir(&digits).expect("model folder");
    for entry in std::fs::read_dir(common::examples().join("digits")).expect("digits") {
        let path = entry.expect("entry").path();
        if path.is_file() {
            std::fs::copy(&path, digits.join(path.file_name().expect("name"))).expect("copy");
        }
    }
    common::require_plugins(repository.path());
    repository
}

/// One sample as the strict parser read it.
#[derive(Clone, Debug, PartialEq)]
struct Sample {
    family: String,
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// `/metrics`, its text and its samples, read by the strict parser (which must accept it).
struct Page {
    text: String,
    samples: Vec<Sample>,
}

impl Page {
    fn of_model<'a>(&'a self, model: &'a str) -> impl Iterator<Item = &'a Sample> + 'a {
        self.samples
            .iter()
            .filter(move |s| s.labels.get("model").map(String::as_str) == Some(model))
    }

    fn family<'a>(&'a self, family: &'a str) -> impl Iterator<Item = &'a Sample> + 'a {
        self.samples.iter().filter(move |s| s.family == family)
    }
}

struct Strict {
    python: PathBuf,
    script: PathBuf,
    scratch: tempfile::TempDir,
}

impl Strict {
    async fn new() -> Self {
        Self {
            python: python().await,
            script: common::root().join("tests/conformance/openmetrics_strict.py"),
            scratch: tempfile::tempdir().expect("temp dir"),
        }
    }

    /// Scrapes `/metrics` and reads it strictly; fails the test (naming `step`) if the
    /// parser refuses it.
    async fn scrape(&self, server: &TestServer, step: &str) -> Page {
        let text = server
            .client
            .get(server.url("/metrics"))
            .send()
            .await
            .expect("GET /metrics")
            .text()
            .await
            .expect("the page");
        let file = self.scratch.path().join("page.txt");
        std::fs::write(&file, &text).expect("write the page");
        let samples = self.parse(&file, step, &text).await;
        Page { text, samples }
    }

    async fn parse(&self, file: &Path, step: &str, text: &str) -> Vec<Sample> {
        let mut command = Command::new(&self.python);
        command.arg(&self.script).arg(file);
        let output = run_bounded("openmetrics_strict.py", command, Duration::from_secs(60)).await;
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "{step}: the strict OpenMetrics parser refused /metrics\n{}\n--- page (start) ---\n{}",
            shown(&output),
            &text[..text.len().min(4000)]
        );
        let mut samples = Vec::new();
        for line in stdout.lines() {
            let family: Value = serde_json::from_str(line).expect("a family as JSON");
            for sample in family["samples"].as_array().expect("samples") {
                samples.push(Sample {
                    family: family["name"].as_str().expect("name").to_owned(),
                    name: sample[0].as_str().expect("sample name").to_owned(),
                    labels: serde_json::from_value(sample[1].clone()).expect("labels"),
                    value: sample[2].as_f64().expect("value"),
                });
            }
        }
        samples
    }
}

/// Sends one item `x` to `model`; its status and error message, if any.
async fn item(server: &TestServer, model: &str, x: f32) -> (u16, String) {
    let (status, body) = server.post_items(model, &[x]).await;
    (status, body["error"].as_str().unwrap_or_default().to_owned())
}

/// What must hold after every step: the page parsed strictly (done by the scrape), one
/// `tensorplug_model_ready` sample per model and all of them 1, and digits' series
/// exactly as before.
fn unharmed(page: &Page, digits_before: &[Sample], step: &str) {
    let ready: Vec<_> = page.family("tensorplug_model_ready").collect();
    assert_eq!(ready.len(), 3, "{step}: {ready:?}");
    assert!(ready.iter().all(|s| s.value == 1.0), "{step}: {ready:?}");
    let digits: Vec<Sample> = page.of_model("digits").cloned().collect();
    assert_eq!(digits, digits_before, "{step}: digits' series changed");
    assert!(
        !page.text.lines().any(|l| l.starts_with("tensorplug_model_ready_total")),
        "{step}: a forged line"
    );
    assert_eq!(
        page.text.lines().filter(|l| *l == "# EOF").count(),
        1,
        "{step}: one # EOF, at the end"
    );
}

fn refused(page: &Page, model: &str, rule: &str) -> f64 {
    page.family("tensorplug_plugin_metrics_refused")
        .filter(|s| s.labels["model"] == model && s.labels["rule"] == rule)
        .map(|s| s.value)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_plugin_metrics_cannot_forge_clash_or_bloat_the_page() {
    let strict = Strict::new().await;
    let repository = repository();
    let server = TestServer::start(repository.path()).await;
    let baseline = strict.scrape(&server, "baseline").await;
    let digits_before: Vec<Sample> = baseline.of_model("digits").cloned().collect();
    assert!(!digits_before.is_empty(), "digits has series");

    // -30: label values that would forge lines are accepted and written escaped: the
    // parser reads each back exactly.
    assert_eq!(item(&server, "faulty", -30.0).await.0, 200);
    let page = strict.scrape(&server, "forged label values").await;
    unharmed(&page, &digits_before, "forged label values");
    let mut forged: Vec<&str> = page
        .family("tensorplug_plugin_forged")
        .map(|s| s.labels["v"].as_str())
        .collect();
    forged.sort();
    let mut expected = vec![
        "\"",
        "\\",
        "a\nb",
        "# EOF",
        "} 0\ntensorplug_model_ready{model=\"digits\"} 0",
        "\"} 1\n# TYPE tensorplug_model_ready counter\ntensorplug_model_ready_total{model=\"digits\"} 7\n# EOF\n",
    ];
    expected.sort();
    assert_eq!(forged, expected);

    // -31: what the text format would not carry faithfully is refused, with the reason.
    let (status, error) = item(&server, "faulty", -31.0).await;
    assert_eq!(status, 422);
    assert!(error.contains("U+000D") && error.contains("OpenMetrics"), "{error}");
    let page = strict.scrape(&server, "carriage return").await;
    unharmed(&page, &digits_before, "carriage return");
    assert_eq!(page.family("tensorplug_plugin_carriage").count(), 0);
    assert_eq!(refused(&page, "faulty", "invalid_labels"), 1.0);

    // -32, -33: names that clash with a family of the same model once suffixed.
    let (status, error) = item(&server, "faulty", -32.0).await;
    assert_eq!(status, 422);
    assert!(
        error.contains("tensorplug_plugin_clash_total") && error.contains("clash"),
        "{error}"
    );
    let (status, error) = item(&server, "faulty", -33.0).await;
    assert_eq!(status, 422);
    for sample in ["hist_count", "hist_sum", "hist_bucket"] {
        assert!(error.contains(&format!("tensorplug_plugin_{sample}")), "{error}");
    }
    let page = strict.scrape(&server, "clashing names").await;
    unharmed(&page, &digits_before, "clashing names");
    assert_eq!(page.family("tensorplug_plugin_clash").count(), 1, "the counter stays");
    assert_eq!(page.family("tensorplug_plugin_hist").count(), 14, "the histogram stays");
    assert_eq!(refused(&page, "faulty", "name_clash"), 4.0);

    // -34 in one model, -35 in another: a name has one type on the page, and the second
    // model can neither change it nor take the first one's samples.
    assert_eq!(item(&server, "faulty", -34.0).await.0, 200);
    let (status, error) = item(&server, "faulty2", -35.0).await;
    assert_eq!(status, 422);
    assert!(error.contains("clash") && error.contains("is a counter"), "{error}");
    let page = strict.scrape(&server, "clash across models").await;
    unharmed(&page, &digits_before, "clash across models");
    let cross: Vec<_> = page.family("tensorplug_plugin_cross").collect();
    assert_eq!(cross.len(), 1, "{cross:?}");
    assert_eq!((cross[0].labels["model"].as_str(), cross[0].value), ("faulty", 1.0));
    assert_eq!(refused(&page, "faulty2", "name_clash"), 2.0);

    // -36: the host's own name under the plugins' prefix.
    let (status, error) = item(&server, "faulty", -36.0).await;
    assert_eq!(status, 422);
    assert!(error.contains("the host's"), "{error}");
    let page = strict.scrape(&server, "the host's name").await;
    unharmed(&page, &digits_before, "the host's name");

    // -37: a flood stops at the per-model byte cap, which bounds what the model added.
    let before = page.text.len();
    let (status, error) = item(&server, "faulty", -37.0).await;
    assert_eq!(status, 422);
    assert!(error.contains("plugin_metrics_bytes_per_model"), "{error}");
    let page = strict.scrape(&server, "flood").await;
    unharmed(&page, &digits_before, "flood");
    let grew = page.text.len() - before;
    println!("the flood added {grew} bytes to /metrics ({} in all)", page.text.len());
    assert!(grew <= BYTES_PER_MODEL, "the flood added {grew} bytes");
    assert!(grew >= BYTES_PER_MODEL / 2, "the flood filled the cap: {grew} bytes");
    assert_eq!(refused(&page, "faulty", "plugin_metrics_bytes_per_model"), 1.0);
    // The other model still has the whole of its own budget.
    let (status, error) = item(&server, "faulty2", -37.0).await;
    assert_eq!(status, 422);
    assert!(error.contains("plugin_metrics_bytes_per_model"), "{error}");
    let page = strict.scrape(&server, "second flood").await;
    unharmed(&page, &digits_before, "second flood");
    assert_eq!(refused(&page, "faulty2", "plugin_metrics_bytes_per_model"), 1.0);
    server.stop().await;
}
