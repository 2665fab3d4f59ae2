//! Turning tracing on: the OTLP exporter, the sampler and the bounded batch queue, from
//! the settings (`tensorplug serve --otlp-*`/`--trace-*`, each with the standard
//! `OTEL_*` variable as its `env`), and off again at shutdown with what waits flushed.

use std::sync::Arc;
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracerProvider};
use opentelemetry_sdk::Resource;

use super::counted::{Bounded, Counted, SpanCounts};

/// How spans are sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum OtlpProtocol {
    /// OTLP over HTTP, protobuf bodies (`<endpoint>/v1/traces`).
    #[default]
    #[value(name = "http/protobuf")]
    HttpProtobuf,
    /// OTLP over gRPC.
    #[value(name = "grpc")]
    Grpc,
}

/// Which requests are traced.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum SamplerKind {
    #[value(name = "always_on")]
    AlwaysOn,
    #[value(name = "always_off")]
    AlwaysOff,
    #[value(name = "traceidratio")]
    TraceIdRatio,
    #[value(name = "parentbased_always_on")]
    ParentBasedAlwaysOn,
    #[value(name = "parentbased_always_off")]
    ParentBasedAlwaysOff,
    /// A request whose client sampled its trace is traced, one whose client did not is
    /// not; one without a context is traced at the ratio.
    #[default]
    #[value(name = "parentbased_traceidratio")]
    ParentBasedTraceIdRatio,
}

/// Where and how spans are exported.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceSettings {
    /// The collector's base URL (`/v1/traces` is added for HTTP), as
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub endpoint: Option<String>,
    /// The traces URL itself, as `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (wins over `endpoint`).
    pub traces_endpoint: Option<String>,
    pub protocol: OtlpProtocol,
    /// `service.name` (`OTEL_RESOURCE_ATTRIBUTES` adds the rest).
    pub service_name: String,
    pub sampler: SamplerKind,
    /// The ratio of the ratio samplers, 0 to 1.
    pub ratio: f64,
    /// Most spans waiting for export; more are dropped and counted.
    pub queue_size: usize,
    /// Longest wait for one export before it counts as failed.
    pub export_timeout: Duration,
    /// Whether the request-duration histograms carry exemplars (a lock per request).
    pub exemplars: bool,
}

/// Why tracing could not be turned on.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("the OTLP endpoint {0:?} is not a URL")]
    Endpoint(String),
    #[error("the trace sampler's ratio must be between 0 and 1, not {0}")]
    Ratio(f64),
    #[error("the OTLP exporter could not be built: {0}")]
    Exporter(String),
}

impl TraceSettings {
    /// The URL spans go to, or None: tracing stays off.
    pub fn url(&self) -> Option<String> {
        if let Some(url) = self.traces_endpoint.as_deref().filter(|u| !u.is_empty()) {
            return Some(url.to_owned());
        }
        let base = self.endpoint.as_deref().filter(|u| !u.is_empty())?;
        Some(match self.protocol {
            OtlpProtocol::HttpProtobuf => format!("{}/v1/traces", base.trim_end_matches('/')),
            OtlpProtocol::Grpc => base.to_owned(),
        })
    }

    fn sampler(&self) -> Sampler {
        let ratio = || Sampler::TraceIdRatioBased(self.ratio);
        let parent_based = |root: Sampler| Sampler::ParentBased(Box::new(root));
        match self.sampler {
            SamplerKind::AlwaysOn => Sampler::AlwaysOn,
            SamplerKind::AlwaysOff => Sampler::AlwaysOff,
            SamplerKind::TraceIdRatio => ratio(),
            SamplerKind::ParentBasedAlwaysOn => parent_based(Sampler::AlwaysOn),
            SamplerKind::ParentBasedAlwaysOff => parent_based(Sampler::AlwaysOff),
            SamplerKind::ParentBasedTraceIdRatio => parent_based(ratio()),
        }
    }
}

/// Tracing, on: what shutdown needs.
pub struct Tracing {
    provider: SdkTracerProvider,
    pub counts: Arc<SpanCounts>,
    url: String,
}

impl Tracing {
    /// The URL spans go to.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Exports what waits (within `grace`) and stops exporting. Blocks: call it off the
    /// runtime's threads.
    pub fn shutdown(&self, grace: Duration) {
        if let Err(error) = self.provider.shutdown_with_timeout(grace) {
            tracing::warn!("spans left unexported at shutdown: {error}");
        }
    }
}

/// Turns tracing on as `settings` say, exporting on the current tokio runtime; None when
/// no endpoint is set (tracing stays off). Only the first call in a process takes effect.
pub fn install(settings: &TraceSettings) -> Result<Option<Tracing>, TraceError> {
    let Some(url) = settings.url() else {
        return Ok(None);
    };
    if !(0.0..=1.0).contains(&settings.ratio) {
        return Err(TraceError::Ratio(settings.ratio));
    }
    url.parse::<http::Uri>()
        .map_err(|_| TraceError::Endpoint(url.clone()))?;
    let counts = Arc::new(SpanCounts::default());
    let exporter = match settings.protocol {
        OtlpProtocol::HttpProtobuf => opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_endpoint(url.clone())
            .with_timeout(settings.export_timeout)
            .build(),
        OtlpProtocol::Grpc => opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(url.clone())
            .with_timeout(settings.export_timeout)
            .build(),
    }
    .map_err(|error| TraceError::Exporter(error.to_string()))?;
    let exporter = Counted {
        inner: exporter,
        counts: counts.clone(),
        runtime: tokio::runtime::Handle::current(),
    };
    let batches = BatchSpanProcessor::builder(exporter)
        .with_batch_config(
            BatchConfigBuilder::default()
                .with_max_queue_size(settings.queue_size)
                .build(),
        )
        .build();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(Bounded {
            inner: batches,
            capacity: settings.queue_size as u64,
            counts: counts.clone(),
        })
        .with_sampler(settings.sampler())
        .with_resource(
            Resource::builder()
                .with_service_name(settings.service_name.clone())
                .build(),
        )
        .build();
    super::set_tracer(provider.tracer("tensorplug"));
    super::EXEMPLARS.store(settings.exemplars, std::sync::atomic::Ordering::Relaxed);
    Ok(Some(Tracing { provider, counts, url }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> TraceSettings {
        TraceSettings {
            endpoint: None,
            traces_endpoint: None,
            protocol: OtlpProtocol::HttpProtobuf,
            service_name: "tensorplug".into(),
            sampler: SamplerKind::default(),
            ratio: 1.0,
            queue_size: 2048,
            export_timeout: Duration::from_secs(10),
            exemplars: false,
        }
    }

    #[test]
    fn the_traces_url_follows_the_otlp_variables_rules() {
        assert_eq!(settings().url(), None, "off without an endpoint");
        let base = TraceSettings {
            endpoint: Some("http://collector:4318/".into()),
            ..settings()
        };
        assert_eq!(base.url().as_deref(), Some("http://collector:4318/v1/traces"));
        let grpc = TraceSettings {
            protocol: OtlpProtocol::Grpc,
            endpoint: Some("http://collector:4317".into()),
            ..settings()
        };
        assert_eq!(grpc.url().as_deref(), Some("http://collector:4317"));
        let own = TraceSettings {
            traces_endpoint: Some("http://elsewhere:9000/traces".into()),
            ..base
        };
        assert_eq!(own.url().as_deref(), Some("http://elsewhere:9000/traces"));
    }

    #[tokio::test]
    async fn bad_settings_are_refused_with_their_reason() {
        let ratio = TraceSettings {
            endpoint: Some("http://127.0.0.1:4318".into()),
            ratio: 1.5,
            ..settings()
        };
        assert!(matches!(install(&ratio), Err(TraceError::Ratio(_))));
        let url = TraceSettings {
            traces_endpoint: Some("not a url at all".into()),
            ..settings()
        };
        assert!(matches!(install(&url), Err(TraceError::Endpoint(_))));
    }
}
