//! `GET /metrics`: every metric of the server in the OpenMetrics text format (which
//! Prometheus scrapes), through prometheus-client, one encoding shared by concurrent
//! scrapes ([`super::scrape`]); and the REST edge's own: requests by route and status,
//! and the connection counters. Every label value is written escaped.

use std::sync::Arc;

use axum::extract::{MatchedPath, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelSet, EncodeLabelValue, EncodeMetric, LabelValueEncoder,
};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use super::connections::ConnectionStats;
use super::scrape::SharedScrapes;
use super::AppState;
use crate::model::openmetrics::{Escaped, EscapingWriter};

/// The content type of the OpenMetrics text format.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The labels of `tensorplug_http_requests_total`; made per request without allocating.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    pub method: &'static str,
    pub route: Route,
    pub status: u16,
}

/// A route's template, exported with `:name` for each parameter
/// (`/v2/models/:model/infer`): braces inside label values trip up some scrapers' parsers.
#[derive(Clone, Debug)]
pub enum Route {
    /// Shared, not copied, from the router's match.
    Matched(MatchedPath),
    /// Named by a handler that knows its route.
    Fixed(&'static str),
    Unmatched,
}

impl Route {
    fn template(&self) -> &str {
        match self {
            Route::Matched(matched) => matched.as_str(),
            Route::Fixed(template) => template,
            Route::Unmatched => "unmatched",
        }
    }
}

impl PartialEq for Route {
    fn eq(&self, other: &Self) -> bool {
        self.template() == other.template()
    }
}

impl Eq for Route {}

impl std::hash::Hash for Route {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.template().hash(state);
    }
}

impl EncodeLabelValue for Route {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        write_template(self.template(), &mut EscapingWriter(encoder))
    }
}

/// `template` with `{name}` written as `:name`.
fn write_template(template: &str, out: &mut impl std::fmt::Write) -> std::fmt::Result {
    for piece in template.split_inclusive(['{', '}']) {
        out.write_str(piece.trim_end_matches(['{', '}']))?;
        if piece.ends_with('{') {
            out.write_str(":")?;
        }
    }
    Ok(())
}

/// A method's name without a copy (the protocol's routes use only these).
fn method_name(method: &axum::http::Method) -> &'static str {
    use axum::http::Method;
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::HEAD => "HEAD",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::OPTIONS => "OPTIONS",
        Method::PATCH => "PATCH",
        _ => "OTHER",
    }
}

/// The REST edge's metrics, and the registry `/metrics` encodes.
#[derive(Clone)]
pub struct HttpMetrics {
    scrapes: Arc<SharedScrapes>,
    requests: Family<RouteLabels, Counter>,
}

impl HttpMetrics {
    /// Adds the REST edge's metrics to `registry` (which holds the others), and keeps it
    /// for `/metrics`.
    pub fn new(mut registry: Registry, connections: Arc<ConnectionStats>) -> Self {
        let requests = Family::<RouteLabels, Counter>::default();
        registry.register(
            "tensorplug_http_requests",
            "REST requests answered, by method, route and status",
            requests.clone(),
        );
        registry.register_collector(Box::new(ConnectionsCollector(connections)));
        Self {
            scrapes: Arc::new(SharedScrapes::new(registry)),
            requests,
        }
    }

    /// Counts one answered request.
    pub fn count(&self, method: &'static str, route: Route, status: u16) {
        let labels = RouteLabels { method, route, status };
        self.requests.get_or_create(&labels).inc();
    }
}

/// Counts each request by its route (a middleware on the router's routes but inference's).
pub async fn count_requests(State(metrics): State<HttpMetrics>, request: Request, next: Next) -> Response {
    let method = method_name(request.method());
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .cloned()
        .map_or(Route::Unmatched, Route::Matched);
    let response = next.run(request).await;
    metrics.count(method, route, response.status().as_u16());
    response
}

pub async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let Some(metrics) = &state.metrics else {
        return super::response::error(axum::http::StatusCode::NOT_FOUND, "metrics are off (--metrics off)");
    };
    match metrics.scrapes.page().await {
        Ok(text) => ([(header::CONTENT_TYPE, OPENMETRICS)], text).into_response(),
        Err(error) => super::response::error(axum::http::StatusCode::INTERNAL_SERVER_ERROR, &error.to_string()),
    }
}

/// The REST port's connection counters (see `http::connections`), read at each scrape.
#[derive(Debug)]
struct ConnectionsCollector(Arc<ConnectionStats>);

impl Collector for ConnectionsCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let stats = &self.0;
        let gauges = [
            (
                "tensorplug_connections_open",
                "Client connections being served",
                stats.open(),
            ),
            (
                "tensorplug_connections_max",
                "Most client connections served at once (--max-connections, lowered to fit the descriptor limit)",
                stats.max(),
            ),
        ];
        for (name, help, value) in gauges {
            let metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX)).encode(metric)?;
        }
        let metric = encoder.encode_descriptor(
            "tensorplug_connections_refused",
            "Connections answered 503 and closed because the connection cap was reached",
            None,
            MetricType::Counter,
        )?;
        ConstCounter::new(stats.refused()).encode(metric)?;
        let mut metric = encoder.encode_descriptor(
            "tensorplug_connections_timed_out",
            "Connections closed, or requests answered 408, for overstaying a timeout \
             (header_read, body_read, idle, or write: a response left unread)",
            None,
            MetricType::Counter,
        )?;
        for (timeout, value) in stats.timed_out() {
            ConstCounter::new(value).encode(metric.encode_family(&[("timeout", Escaped(timeout))])?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_are_written_with_colon_parameters() {
        let written = |template: &str| {
            let mut text = String::new();
            write_template(template, &mut text).unwrap();
            text
        };
        assert_eq!(
            written("/v2/models/{model}/versions/{version}/infer"),
            "/v2/models/:model/versions/:version/infer"
        );
        assert_eq!(written("/metrics"), "/metrics");
        assert_eq!(written("unmatched"), "unmatched");
    }
}
