//! `/metrics` read back through a Prometheus text parser (`prometheus-parse`), with
//! lookups by metric name and labels.

use prometheus_parse::{Scrape, Value};

use super::TestServer;

/// The server's metrics, parsed; fails the test if the body is not Prometheus text.
pub async fn scrape(server: &TestServer) -> Metrics {
    let response = get_metrics(&server.client, server.url("/metrics")).await;
    let content_type = response.headers()["content-type"]
        .to_str()
        .expect("content type")
        .to_owned();
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    Metrics::parse(response.text().await.expect("metrics body"))
}

/// `/metrics` of a server process, parsed.
pub async fn scrape_process(server: &super::process::ServerProcess) -> Metrics {
    let response = get_metrics(&server.client, server.url("/metrics")).await;
    Metrics::parse(response.text().await.expect("metrics body"))
}

/// `/metrics` of a server process as text, unparsed (exemplars and all).
pub async fn text_of_process(server: &super::process::ServerProcess) -> String {
    let response = get_metrics(&server.client, server.url("/metrics")).await;
    response.text().await.expect("metrics body")
}

/// `/metrics` at `url`, parsed; `None` if it could not be fetched (a sampler that must not
/// fail the test on one lost scrape).
pub async fn scrape_url(url: &str) -> Option<Metrics> {
    let response = reqwest::get(url).await.ok()?;
    Some(Metrics::parse(response.text().await.ok()?))
}

async fn get_metrics(client: &reqwest::Client, url: String) -> reqwest::Response {
    let response = client.get(url).send().await.expect("GET /metrics");
    assert_eq!(response.status(), 200);
    response
}

pub struct Metrics {
    pub scrape: Scrape,
    pub text: String,
}

impl Metrics {
    /// An OpenMetrics exposition, parsed.
    pub fn parse(text: String) -> Metrics {
        assert!(text.ends_with("# EOF\n"), "an OpenMetrics exposition ends with # EOF");
        let scrape = Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).expect("Prometheus text");
        Metrics { scrape, text }
    }

    /// Samples named `name` whose labels include `labels`.
    fn matching<'a>(&'a self, name: &'a str, labels: &'a [(&str, &str)]) -> impl Iterator<Item = &'a Value> + 'a {
        self.scrape
            .samples
            .iter()
            .filter(move |s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
            .map(|s| &s.value)
    }

    /// The value of the one sample `name` with `labels`; panics if there is none or several.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let values: Vec<f64> = self
            .matching(name, labels)
            .map(|v| match v {
                Value::Counter(x) | Value::Gauge(x) | Value::Untyped(x) => *x,
                other => panic!("{name} is not a single value: {other:?}"),
            })
            .collect();
        assert_eq!(values.len(), 1, "{name}{labels:?}: {values:?} in\n{}", self.text);
        values[0]
    }

    /// The value of `name` with `labels`, or 0 when there is no such sample.
    pub fn value_or_zero(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        match self.matching(name, labels).count() {
            0 => 0.0,
            _ => self.value(name, labels),
        }
    }

    /// Whether any sample of `name` has `labels`.
    pub fn has(&self, name: &str, labels: &[(&str, &str)]) -> bool {
        self.matching(name, labels).next().is_some()
    }

    /// A histogram's observation count (its `_count` sample), with its buckets checked:
    /// cumulative, ending in `+Inf` = count.
    pub fn histogram_count(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let count = self.value(&format!("{name}_count"), labels);
        let buckets: Vec<&Value> = self.matching(name, labels).collect();
        assert_eq!(buckets.len(), 1, "{name}{labels:?} buckets");
        let Value::Histogram(buckets) = buckets[0] else {
            panic!("{name} is not a histogram")
        };
        assert!(
            buckets.windows(2).all(|w| w[0].count <= w[1].count),
            "{name} buckets are cumulative"
        );
        let last = buckets.last().expect("buckets");
        assert!(
            last.less_than.is_infinite() && last.count == count,
            "{name}: +Inf bucket = count"
        );
        count
    }

    /// Observations of a histogram at most `le`.
    pub fn bucket(&self, name: &str, labels: &[(&str, &str)], le: f64) -> f64 {
        let Some(Value::Histogram(buckets)) = self.matching(name, labels).next() else {
            panic!("no histogram {name}{labels:?}")
        };
        buckets
            .iter()
            .find(|b| b.less_than == le)
            .map(|b| b.count)
            .unwrap_or_else(|| panic!("{name} has no bucket le={le}"))
    }
}
