//! The REST edge's side of tracing: the context a request's headers carry in, its server
//! span (named and described after OpenTelemetry's HTTP server conventions), and the
//! `traceparent` its answer carries back.

use std::borrow::Cow;

use axum::http::{HeaderMap, HeaderValue};
use axum::response::Response;
use opentelemetry::trace::SpanKind;
use opentelemetry::KeyValue;

use crate::traces::{EdgeSpan, Incoming, RequestTrace};

/// Starts the server span of a `POST` to `route` (its template, e.g.
/// `/v2/models/{model}/infer`) at the path `path` gives, in the trace its headers name.
pub fn start(headers: &HeaderMap, route: &'static str, path: impl FnOnce() -> String) -> RequestTrace {
    let values = |name| headers.get_all(name).into_iter().map(HeaderValue::as_bytes);
    let incoming = Incoming::from_headers(values("traceparent"), values("tracestate"));
    let edge = || EdgeSpan {
        name: span_name(route),
        kind: SpanKind::Server,
        status: |status| KeyValue::new("http.response.status_code", i64::from(status)),
    };
    RequestTrace::start(incoming, edge, || {
        vec![
            KeyValue::new("http.request.method", "POST"),
            KeyValue::new("http.route", route),
            KeyValue::new("url.path", crate::protocol::clip(&path()).into_owned()),
            KeyValue::new("url.scheme", "http"),
        ]
    })
}

/// `POST {route}`, as the HTTP conventions name a server span; the inference routes'
/// without a format per request.
fn span_name(route: &'static str) -> Cow<'static, str> {
    match route {
        super::INFER_ROUTE => "POST /v2/models/{model}/infer".into(),
        super::INFER_VERSION_ROUTE => "POST /v2/models/{model}/versions/{version}/infer".into(),
        _ => format!("POST {route}").into(),
    }
}

/// Marks `response` with the server span's `traceparent`, when there is one.
pub fn carry(response: &mut Response, traceparent: Option<String>) {
    if let Some(value) = traceparent.and_then(|t| HeaderValue::from_str(&t).ok()) {
        response.headers_mut().insert("traceparent", value);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_inference_routes_spans_are_named_post_and_their_template() {
        for route in [super::super::INFER_ROUTE, super::super::INFER_VERSION_ROUTE] {
            assert_eq!(super::span_name(route), format!("POST {route}"));
        }
    }
}
