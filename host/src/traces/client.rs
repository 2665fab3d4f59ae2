//! A batch job's trace (`tensorplug infer` with tracing on): one root span for the run, and
//! a client span for each request it sends, whose context the request carries to the
//! server (a `traceparent` header or metadata entry, NATS message headers, or, in-process,
//! the parent of the server span itself). A run's slow lines are then found in one trace.

use opentelemetry::trace::{SpanBuilder, SpanKind, Status, TraceContextExt, Tracer};
use opentelemetry::{Context, KeyValue};

use super::context::Incoming;

/// A run's root span; nothing when tracing is off.
pub struct JobTrace {
    root: Option<Context>,
}

impl JobTrace {
    /// Starts the run's root span, named for the model it runs.
    pub fn start(model: &str, transport: &'static str) -> JobTrace {
        let Some(tracer) = super::tracer() else {
            return JobTrace { root: None };
        };
        let span = tracer.build_with_context(
            SpanBuilder::from_name("tensorplug infer")
                .with_kind(SpanKind::Internal)
                .with_attributes(vec![
                    KeyValue::new("tensorplug.model.name", model.to_owned()),
                    KeyValue::new("tensorplug.infer.transport", transport),
                ]),
            &Context::new(),
        );
        JobTrace {
            root: Some(Context::new().with_span(span)),
        }
    }

    /// The trace id of the run, for its log.
    pub fn trace_id(&self) -> Option<String> {
        let root = self.root.as_ref()?;
        Some(root.span().span_context().trace_id().to_string())
    }

    /// A client span for one request of `lines` lines.
    pub fn request(&self, lines: usize) -> ClientTrace {
        let (Some(tracer), Some(root)) = (super::tracer(), self.root.as_ref()) else {
            return ClientTrace { context: None };
        };
        let span = tracer.build_with_context(
            SpanBuilder::from_name("tensorplug.infer.request")
                .with_kind(SpanKind::Client)
                .with_attributes(vec![KeyValue::new("tensorplug.infer.lines", lines as i64)]),
            root,
        );
        ClientTrace {
            context: Some(root.with_span(span)),
        }
    }

    /// Ends the run's span with how many lines failed.
    pub fn finish(self, lines: u64, failed: u64) {
        let Some(root) = self.root else { return };
        let span = root.span();
        span.set_attribute(KeyValue::new("tensorplug.infer.lines", lines as i64));
        span.set_attribute(KeyValue::new("tensorplug.infer.failed", failed as i64));
        span.end();
    }
}

/// One request's client span; nothing when tracing is off.
pub struct ClientTrace {
    context: Option<Context>,
}

impl ClientTrace {
    /// The `traceparent` the request carries (None when tracing is off).
    pub fn traceparent(&self) -> Option<String> {
        let span = self.context.as_ref()?.span().span_context().clone();
        span.is_valid().then(|| super::request::traceparent_of(&span))
    }

    /// The context an in-process request's server span continues.
    pub fn incoming(&self) -> Incoming {
        match &self.context {
            Some(context) => Incoming {
                parent: context.clone(),
            },
            None => Incoming::default(),
        }
    }

    /// Ends the span with the status the request was answered with (an HTTP status
    /// number; 0 when no answer came).
    pub fn finish(mut self, status: u16) {
        let Some(context) = self.context.take() else { return };
        let span = context.span();
        span.set_attribute(KeyValue::new("tensorplug.status", i64::from(status)));
        if status == 0 || status >= 500 {
            span.set_status(Status::error(format!("answered {status}")));
        }
        span.end();
    }
}

impl Drop for ClientTrace {
    fn drop(&mut self) {
        if let Some(context) = self.context.take() {
            context.span().end();
        }
    }
}
