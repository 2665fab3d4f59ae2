//! Distributed tracing: the W3C trace context a request comes with, read on every edge;
//! the spans of its way through the server (the edge's server span, the dynamic batch
//! that served it, each plugin call, `wasi:nn` computes, a model load it waited for),
//! made with OpenTelemetry's SDK and exported over OTLP through a bounded queue whose
//! drops are counted.
//!
//! Off unless an OTLP endpoint is configured ([`install`]); off, every hook is one read of
//! an unset global.
//!
//! One batch serves items of many requests, and a span has one parent. So each traced
//! request of a batch gets a `tensorplug.batch` span of its own (batch size, its items,
//! the time it queued, the model version, the batch's number); the first of them, the
//! batch's *leader*, also holds the batch's plugin calls as child spans, and the others
//! link to the leader's batch span. A request alone in its batch (every request of an
//! idle server) is its own leader: its trace is the whole tree.
//!
//! Layout: `context` (the headers in, bounded), `request` (a request's server span and
//! what the items carry into the batch), `journal` (the plugin calls of a traced batch,
//! noted on its thread), `batch` (the spans made from a journal), `export` (the tracer
//! provider from the settings), `counted` (the queue's bound and the counts), `client`
//! (`tensorplug infer`'s run and request spans).

mod batch;
mod client;
mod context;
mod counted;
mod export;
pub mod journal;
mod request;

use std::sync::OnceLock;
use std::time::{Instant, SystemTime};

use opentelemetry_sdk::trace::SdkTracer;

pub use batch::{record_batch, BatchRun};
pub use client::{ClientTrace, JobTrace};
pub use context::Incoming;
pub use counted::{SpanCounts, SpanCountsCollector};
pub use export::{install, OtlpProtocol, SamplerKind, TraceError, TraceSettings, Tracing};
pub use request::{EdgeSpan, ItemsTrace, RequestTrace};

static TRACER: OnceLock<SdkTracer> = OnceLock::new();
static EXEMPLARS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether tracing is on.
pub fn enabled() -> bool {
    TRACER.get().is_some()
}

/// Whether the request-duration histograms keep exemplars (tracing on, and
/// `--trace-exemplars`).
pub fn exemplars() -> bool {
    enabled() && EXEMPLARS.load(std::sync::atomic::Ordering::Relaxed)
}

fn tracer() -> Option<&'static SdkTracer> {
    TRACER.get()
}

fn set_tracer(tracer: SdkTracer) {
    let _ = TRACER.set(tracer);
}

/// Instants as wall-clock times (spans carry the latter), from one reading of each clock.
struct Clock {
    instant: Instant,
    wall: SystemTime,
}

impl Clock {
    fn now() -> Clock {
        Clock {
            instant: Instant::now(),
            wall: SystemTime::now(),
        }
    }

    fn at(&self, instant: Instant) -> SystemTime {
        self.wall - self.instant.saturating_duration_since(instant)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::{Arc, Mutex, OnceLock};

    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_sdk::error::OTelSdkResult;
    use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};

    /// Every span the unit tests' tracer exported.
    #[derive(Clone, Debug, Default)]
    pub struct Collected(pub Arc<Mutex<Vec<SpanData>>>);

    impl SpanExporter for Collected {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            self.0.lock().unwrap().extend(batch);
            Ok(())
        }
    }

    /// Turns tracing on for this test process (every span sampled, exported at once into
    /// what this returns).
    pub fn with_tracing_on() -> Collected {
        static COLLECTED: OnceLock<Collected> = OnceLock::new();
        COLLECTED
            .get_or_init(|| {
                let collected = Collected::default();
                let provider = SdkTracerProvider::builder()
                    .with_simple_exporter(collected.clone())
                    .build();
                super::set_tracer(provider.tracer("tensorplug-test"));
                // The provider shuts down when dropped; the tests' tracer lives as long
                // as the process.
                std::mem::forget(provider);
                collected
            })
            .clone()
    }
}
