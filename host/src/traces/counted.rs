//! The export queue's bound, and what became of every span.
//!
//! A span that ends goes to OpenTelemetry's batch processor only while fewer than the
//! queue's size wait for their export; past that it is dropped here and counted. (The
//! batch processor would drop it too, but counts its drops only in a log line at
//! shutdown.) The exporter in front of OTLP counts what each export did, and runs it on
//! the server's tokio runtime (OTLP's HTTP and gRPC clients need one; the batch
//! processor calls it from a thread of its own).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use opentelemetry::Context;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanExporter, SpanProcessor};
use opentelemetry_sdk::Resource;

/// What became of the spans the server made (sampled ones: the others are never made).
#[derive(Debug, Default)]
pub struct SpanCounts {
    /// Delivered to the collector.
    pub exported: AtomicU64,
    /// Handed to an export that failed (collector down, refusing, or too slow).
    pub failed: AtomicU64,
    /// Dropped because the export queue was full.
    pub dropped: AtomicU64,
    /// Ended and queued, not yet through an export.
    waiting: AtomicU64,
}

impl SpanCounts {
    /// Spans waiting for their export now.
    pub fn waiting(&self) -> u64 {
        self.waiting.load(Ordering::Relaxed)
    }
}

/// A span processor that hands spans to `inner` while fewer than `capacity` wait.
#[derive(Debug)]
pub(super) struct Bounded<P> {
    pub inner: P,
    pub capacity: u64,
    pub counts: Arc<SpanCounts>,
}

impl<P: SpanProcessor> SpanProcessor for Bounded<P> {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        if self.counts.waiting.fetch_add(1, Ordering::AcqRel) >= self.capacity {
            self.counts.waiting.fetch_sub(1, Ordering::AcqRel);
            self.counts.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// An exporter that runs `inner`'s exports on `runtime` and counts their outcomes.
#[derive(Debug)]
pub(super) struct Counted<E> {
    pub inner: E,
    pub counts: Arc<SpanCounts>,
    pub runtime: tokio::runtime::Handle,
}

impl<E: SpanExporter> SpanExporter for Counted<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len() as u64;
        // Called on the batch processor's own thread, never on a runtime thread.
        let result = self.runtime.block_on(self.inner.export(batch));
        let outcome = match result {
            Ok(()) => &self.counts.exported,
            Err(_) => &self.counts.failed,
        };
        outcome.fetch_add(spans, Ordering::Relaxed);
        self.counts.waiting.fetch_sub(spans, Ordering::AcqRel);
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// The counts on `/metrics`: `tensorplug_trace_spans{outcome}` and the spans waiting.
#[derive(Debug)]
pub struct SpanCountsCollector(pub Arc<SpanCounts>);

impl prometheus_client::collector::Collector for SpanCountsCollector {
    fn encode(&self, mut encoder: prometheus_client::encoding::DescriptorEncoder) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric;
        use prometheus_client::metrics::counter::ConstCounter;
        use prometheus_client::metrics::gauge::ConstGauge;
        use prometheus_client::metrics::MetricType;

        let counts = &self.0;
        let mut metric = encoder.encode_descriptor(
            "tensorplug_trace_spans",
            "Spans of sampled requests, by what became of them: exported to the OTLP collector, failed (the export failed or timed out), dropped (the export queue was full)",
            None,
            MetricType::Counter,
        )?;
        for (outcome, count) in [
            ("exported", &counts.exported),
            ("failed", &counts.failed),
            ("dropped", &counts.dropped),
        ] {
            ConstCounter::new(count.load(Ordering::Relaxed)).encode(metric.encode_family(&[("outcome", outcome)])?)?;
        }
        let metric = encoder.encode_descriptor(
            "tensorplug_trace_spans_waiting",
            "Spans waiting in the export queue (bounded by --trace-queue-size)",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(counts.waiting() as i64).encode(metric)?;
        Ok(())
    }
}
