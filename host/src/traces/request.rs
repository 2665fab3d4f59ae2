//! A request's server span, from its edge's start to its answer, and what its items carry
//! into the batcher so that the batch that serves them shows in its trace.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use opentelemetry::trace::{Span, SpanBuilder, SpanContext, SpanKind, Status, TraceContextExt, Tracer};
use opentelemetry::{Context, KeyValue};

use super::context::Incoming;
use super::Clock;

/// What an edge says of its server span: the name and kind its semantic conventions give
/// (HTTP, RPC, messaging), and the attribute its answer's status becomes.
pub struct EdgeSpan {
    pub name: Cow<'static, str>,
    pub kind: SpanKind,
    /// The edge's status attribute for a protocol-neutral status (an HTTP status number).
    pub status: fn(u16) -> KeyValue,
}

/// A request's server span; nothing when tracing is off.
pub struct RequestTrace {
    /// The span, in a context that holds it (the parent of everything the request does).
    context: Option<Context>,
    status: fn(u16) -> KeyValue,
}

impl RequestTrace {
    /// A request that is not traced (tracing off).
    pub fn off() -> RequestTrace {
        RequestTrace {
            context: None,
            status: |status| KeyValue::new("tensorplug.status", i64::from(status)),
        }
    }

    /// The trace, leaving this one off: for an edge that hands its request's trace to the
    /// call that answers it, and finishes what it still holds (nothing, once handed on).
    pub fn take(&mut self) -> RequestTrace {
        std::mem::replace(self, RequestTrace::off())
    }

    /// Starts the server span of a request that came with `incoming`; `attributes` (what
    /// the edge knows at the start) are made only for a span that is recorded.
    pub fn start(
        incoming: Incoming,
        edge: impl FnOnce() -> EdgeSpan,
        attributes: impl FnOnce() -> Vec<KeyValue>,
    ) -> RequestTrace {
        let Some(tracer) = super::tracer() else {
            return RequestTrace::off();
        };
        let edge = edge();
        let builder = SpanBuilder::from_name(edge.name).with_kind(edge.kind);
        let mut span = tracer.build_with_context(builder, &incoming.parent);
        if span.is_recording() {
            span.set_attributes(attributes());
        }
        RequestTrace {
            context: Some(incoming.parent.with_span(span)),
            status: edge.status,
        }
    }

    fn span_context(&self) -> Option<SpanContext> {
        self.context.as_ref().map(|cx| cx.span().span_context().clone())
    }

    /// Whether the request's spans are recorded (traced and sampled).
    pub fn is_recording(&self) -> bool {
        self.context.as_ref().is_some_and(|cx| cx.span().is_recording())
    }

    /// The `traceparent` of the server span, for the answer (a client finds its trace by
    /// it, sampled or not); None when tracing is off.
    pub fn traceparent(&self) -> Option<String> {
        self.span_context().map(|span| traceparent_of(&span))
    }

    /// The trace and span ids, for log lines; None unless recorded.
    pub fn ids(&self) -> Option<(String, String)> {
        let span = self.span_context().filter(|_| self.is_recording())?;
        Some((span.trace_id().to_string(), span.span_id().to_string()))
    }

    /// What the request's items carry into the batcher (None unless recorded): their
    /// model's name and version.
    pub fn for_items(&self, model: &str, version: &str) -> Option<Arc<ItemsTrace>> {
        let context = self.context.as_ref().filter(|cx| cx.span().is_recording())?;
        Some(Arc::new(ItemsTrace {
            parent: context.clone(),
            queued_at: Instant::now(),
            model: vec![
                KeyValue::new("tensorplug.model.name", model.to_owned()),
                KeyValue::new("tensorplug.model.version", version.to_owned()),
            ],
        }))
    }

    /// Item `index` of the request failed with `status`.
    pub fn item_failed(&self, index: usize, status: u16, message: &str) {
        let Some(context) = self.context.as_ref().filter(|cx| cx.span().is_recording()) else {
            return;
        };
        context.span().add_event(
            "tensorplug.item.failed",
            vec![
                KeyValue::new("tensorplug.item.index", index as i64),
                KeyValue::new("tensorplug.item.status", i64::from(status)),
                KeyValue::new("exception.message", clipped(message)),
            ],
        );
    }

    /// The request, arrived at `arrived`, waited for its model's load: for room or its turn
    /// until `began`, then for the load itself until `resident`.
    pub fn waited_for_load(&self, model: &str, arrived: Instant, began: Instant, resident: Instant) {
        let (Some(tracer), Some(context)) = (super::tracer(), self.context.as_ref()) else {
            return;
        };
        if !context.span().is_recording() {
            return;
        }
        let clock = Clock::now();
        let (began, resident) = (began.max(arrived), resident.max(arrived));
        let mut span = tracer.build_with_context(
            SpanBuilder::from_name("tensorplug.model.load")
                .with_start_time(clock.at(arrived))
                .with_attributes(vec![
                    KeyValue::new("tensorplug.model.name", model.to_owned()),
                    KeyValue::new("tensorplug.load.waiting_ms", millis(began - arrived)),
                    KeyValue::new("tensorplug.load.loading_ms", millis(resident - began)),
                ]),
            context,
        );
        span.end_with_timestamp(clock.at(resident));
    }

    /// Ends the server span with the request's protocol-neutral `status` (an HTTP status
    /// number); a 5xx marks it as an error.
    pub fn finish(mut self, status: u16) {
        let Some(context) = self.context.take() else { return };
        let span = context.span();
        if span.is_recording() {
            span.set_attribute((self.status)(status));
            if status >= 500 {
                span.set_status(Status::error(format!("answered {status}")));
            }
        }
        span.end();
    }
}

impl Drop for RequestTrace {
    fn drop(&mut self) {
        // A request dropped before its answer (its client left): the span still ends.
        if let Some(context) = self.context.take() {
            let span = context.span();
            span.set_attribute(KeyValue::new("tensorplug.abandoned", true));
            span.end();
        }
    }
}

/// What a traced request's items carry into its model's batcher.
#[derive(Debug)]
pub struct ItemsTrace {
    /// The request's server span, in its context.
    pub(super) parent: Context,
    /// When the items were handed to the model.
    pub(super) queued_at: Instant,
    /// The model's name and version, as attributes.
    pub(super) model: Vec<KeyValue>,
}

/// Longest text put in an attribute from a plugin or an error.
pub(super) const MAX_TEXT: usize = 1024;

/// `text` cut to [`MAX_TEXT`] bytes on a character boundary.
pub(super) fn clipped(text: &str) -> String {
    crate::model::text::cut_to_bytes(text, MAX_TEXT).to_owned()
}

/// The W3C `traceparent` naming `span`.
pub(super) fn traceparent_of(span: &SpanContext) -> String {
    format!(
        "00-{}-{}-{:02x}",
        span.trace_id(),
        span.span_id(),
        span.trace_flags().to_u8()
    )
}

/// A duration in milliseconds, as span attributes give them.
pub(super) fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}
