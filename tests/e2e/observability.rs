//! The Grafana dashboard (deploy/grafana/) and the alert rules (deploy/prometheus/) name
//! only metrics the server exports: every `tensorplug_*` name in their expressions is
//! checked against the families of a live `/metrics` page (a histogram's `_bucket`,
//! `_count` and `_sum`, a counter's `_total`), so they cannot drift from the code.

use std::collections::HashMap;

use crate::common;
use crate::languages::repository_of;

use common::TestServer;

/// The `tensorplug_*` names in `text`.
fn metric_names(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("tensorplug_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.push(tail[..end].to_string());
        rest = &tail[end..];
    }
    names
}

/// Whether `name`, as written in a query, is a series of one of `families` (name → kind).
fn exported(name: &str, families: &HashMap<String, String>) -> bool {
    let kind_of = |family: &str| families.get(family).map(String::as_str);
    if kind_of(name).is_some_and(|kind| kind == "gauge" || kind == "counter") {
        return true;
    }
    let suffixed = |suffix: &str, kinds: &[&str]| {
        name.strip_suffix(suffix)
            .and_then(kind_of)
            .is_some_and(|kind| kinds.contains(&kind))
    };
    suffixed("_total", &["counter"])
        || suffixed("_bucket", &["histogram"])
        || suffixed("_count", &["histogram"])
        || suffixed("_sum", &["histogram"])
}

/// The metric families (name → kind) of a server of the digits model started with
/// `config`, once it has answered a request.
async fn families_of(config: tensorplug::app::config::ServeConfig) -> HashMap<String, String> {
    let server = TestServer::start_with(config).await;
    let line = std::fs::read_to_string(common::root().join("tests/data/digits/test_requests.jsonl")).unwrap();
    let (status, _) = server
        .post_raw(
            "/v2/models/digits/infer",
            line.lines().next().unwrap().as_bytes().to_vec(),
            None,
        )
        .await;
    assert_eq!(status, 200);
    let page = server
        .client
        .get(server.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    server.stop().await;
    page.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .map(|(name, kind)| (name.to_string(), kind.trim().to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_and_the_alerts_name_only_exported_metrics() {
    let repository = repository_of(&common::examples().join("digits"));
    // Every model resident (the per-model load counters), and on demand under a budget,
    // the model loaded by its first request (the budget's and the cold starts' families).
    let mut families = families_of(common::serve_config(repository.path())).await;
    let mut config = common::serve_config(repository.path());
    config.residency = tensorplug::app::config::ResidencyMode::OnDemand;
    config.memory_budget_mib = Some(256);
    families.extend(families_of(config).await);
    assert!(families.len() > 20, "{families:?}");

    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(common::root().join("deploy/grafana/tensorplug-dashboard.json")).unwrap(),
    )
    .unwrap();
    let mut expressions = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            expressions.push(target["expr"].as_str().unwrap().to_string());
        }
    }
    assert!(expressions.len() >= 10, "{expressions:?}");
    let alerts = std::fs::read_to_string(common::root().join("deploy/prometheus/alerts.yaml")).unwrap();
    assert!(alerts.matches("- alert:").count() >= 5, "{alerts}");
    expressions.push(alerts);

    let mut named = 0;
    for expression in &expressions {
        for name in metric_names(expression) {
            assert!(
                exported(&name, &families),
                "`{name}` is not exported by the server (in `{expression}`)"
            );
            named += 1;
        }
    }
    assert!(named >= 20, "only {named} metric names found");
}
