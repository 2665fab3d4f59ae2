//! The gRPC edge's side of tracing: the context a call's metadata carries in, its server
//! span (named and described after OpenTelemetry's RPC conventions), and the
//! `traceparent` its answer carries back in its metadata.

use opentelemetry::trace::SpanKind;
use opentelemetry::KeyValue;
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::{Response, Status};

use super::status::code_for;
use crate::traces::{EdgeSpan, Incoming, RequestTrace};

const SERVICE: &str = "inference.GRPCInferenceService";

/// The trace context a call's metadata names.
pub fn incoming(metadata: &MetadataMap) -> Incoming {
    let values = |name| metadata.get_all(name).into_iter().map(|value| value.as_bytes());
    Incoming::from_headers(values("traceparent"), values("tracestate"))
}

/// Starts the server span of one inference of `method` (`ModelInfer`, or one message of
/// a `ModelStreamInfer`).
pub fn start(incoming: Incoming, method: &'static str) -> RequestTrace {
    let edge = || EdgeSpan {
        name: match method {
            "ModelInfer" => "inference.GRPCInferenceService/ModelInfer".into(),
            "ModelStreamInfer" => "inference.GRPCInferenceService/ModelStreamInfer".into(),
            _ => format!("{SERVICE}/{method}").into(),
        },
        kind: SpanKind::Server,
        status: |status| KeyValue::new("rpc.grpc.status_code", code_for(status) as i64),
    };
    RequestTrace::start(incoming, edge, || {
        vec![
            KeyValue::new("rpc.system", "grpc"),
            KeyValue::new("rpc.service", SERVICE),
            KeyValue::new("rpc.method", method),
        ]
    })
}

/// Marks a call's answer (its response or its status) with the server span's
/// `traceparent`, when there is one.
pub fn carry<T>(answer: &mut Result<Response<T>, Status>, traceparent: Option<String>) {
    let Some(value) = traceparent.and_then(|t| MetadataValue::try_from(t).ok()) else {
        return;
    };
    let metadata = match answer {
        Ok(response) => response.metadata_mut(),
        Err(status) => status.metadata_mut(),
    };
    metadata.insert("traceparent", value);
}
