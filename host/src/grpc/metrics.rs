//! The gRPC edge's counters: `tensorplug_grpc_requests_total` by method and status code (a
//! streamed request counts as one `ModelStreamInfer` call each), refused connections, calls
//! cut off by a timeout (a request message too slow to arrive, an answer left unread) and
//! malformed messages answered `INVALID_ARGUMENT` before any service saw them.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use tonic::Code;

use super::status::code_name;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MethodLabels {
    method: &'static str,
    code: &'static str,
}

/// Counts calls of the inference service.
#[derive(Clone, Debug, Default)]
pub struct GrpcMetrics {
    requests: Family<MethodLabels, Counter>,
    refused: Counter,
    timed_out: Family<TimeoutLabels, Counter>,
    malformed: Counter,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TimeoutLabels {
    timeout: &'static str,
}

impl GrpcMetrics {
    /// Counters registered in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "tensorplug_grpc_requests",
            "gRPC inference-service calls answered, by method and status code",
            metrics.requests.clone(),
        );
        registry.register(
            "tensorplug_grpc_connections_refused",
            "gRPC connections closed at once because the connection cap (shared with REST) was reached",
            metrics.refused.clone(),
        );
        registry.register(
            "tensorplug_grpc_timed_out",
            "gRPC calls cut off by a timeout: message_read (a request message not arrived within \
             --body-read-timeout-ms) or answer_unread (an answer left unread for --idle-timeout-ms)",
            metrics.timed_out.clone(),
        );
        registry.register(
            "tensorplug_grpc_malformed",
            "gRPC calls whose request message or framing was malformed (answered INVALID_ARGUMENT)",
            metrics.malformed.clone(),
        );
        metrics
    }

    pub fn count_timed_out(&self, timeout: &'static str) {
        self.timed_out.get_or_create(&TimeoutLabels { timeout }).inc();
    }

    pub fn count_malformed(&self) {
        self.malformed.inc();
    }

    pub fn count_refused(&self) {
        self.refused.inc();
    }

    pub fn count(&self, method: &'static str, code: Code) {
        let labels = MethodLabels {
            method,
            code: code_name(code),
        };
        self.requests.get_or_create(&labels).inc();
    }
}
