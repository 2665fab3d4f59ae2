//! An OTLP receiver for the tracing tests, over HTTP (or gRPC, with OpenTelemetry's own
//! service definition): what the server exports, decoded with OpenTelemetry's own protobuf
//! messages (the `opentelemetry-proto` crate), as plain spans to assert on. Over HTTP it
//! can also refuse every export, or take them and never answer.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use prost::Message;

/// How the receiver answers exports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Behaviour {
    /// Takes them.
    Accept,
    /// Answers 503 to every one.
    Refuse,
    /// Reads them and never answers.
    BlackHole,
}

/// One exported span, as the tests read it.
#[derive(Clone, Debug)]
pub struct Span {
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    pub name: String,
    /// 1 internal, 2 server, 3 client, 4 producer, 5 consumer.
    pub kind: i32,
    pub attributes: BTreeMap<String, String>,
    pub events: Vec<(String, BTreeMap<String, String>)>,
    /// (trace id, span id) of each link.
    pub links: Vec<(String, String)>,
    /// 0 unset, 1 ok, 2 error.
    pub status: i32,
    pub start_ns: u64,
    pub end_ns: u64,
}

impl Span {
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }

    pub fn millis(&self) -> f64 {
        self.end_ns.saturating_sub(self.start_ns) as f64 / 1e6
    }
}

#[derive(Default)]
struct Received {
    spans: Vec<Span>,
    exports: usize,
    bytes: usize,
    service_names: Vec<String>,
}

/// A running receiver on 127.0.0.1.
pub struct Receiver {
    /// Its base URL (`OTEL_EXPORTER_OTLP_ENDPOINT`).
    pub endpoint: String,
    received: Arc<Mutex<Received>>,
    behaviour: Arc<Mutex<Behaviour>>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Clone)]
struct Shared {
    received: Arc<Mutex<Received>>,
    behaviour: Arc<Mutex<Behaviour>>,
}

impl Receiver {
    pub async fn start(behaviour: Behaviour) -> Receiver {
        let shared = Shared {
            received: Arc::default(),
            behaviour: Arc::new(Mutex::new(behaviour)),
        };
        let app = Router::new()
            .route("/v1/traces", post(export))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the receiver");
        let endpoint = format!("http://{}", listener.local_addr().expect("address"));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Receiver {
            endpoint,
            received: shared.received,
            behaviour: shared.behaviour,
            task,
        }
    }

    /// A receiver of OTLP over gRPC (`--otlp-protocol grpc`), taking every export.
    pub async fn start_grpc() -> Receiver {
        let shared = Shared {
            received: Arc::default(),
            behaviour: Arc::new(Mutex::new(Behaviour::Accept)),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the receiver");
        let endpoint = format!("http://{}", listener.local_addr().expect("address"));
        let incoming = tonic::transport::server::TcpIncoming::from(listener);
        let service = TraceServiceServer::new(GrpcReceiver(shared.clone()));
        let task = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(incoming)
                .await;
        });
        Receiver {
            endpoint,
            received: shared.received,
            behaviour: shared.behaviour,
            task,
        }
    }

    pub fn set(&self, behaviour: Behaviour) {
        *self.behaviour.lock().unwrap() = behaviour;
    }

    pub fn spans(&self) -> Vec<Span> {
        self.received.lock().unwrap().spans.clone()
    }

    /// Export requests that arrived (answered or not).
    pub fn exports(&self) -> usize {
        self.received.lock().unwrap().exports
    }

    pub fn service_names(&self) -> Vec<String> {
        self.received.lock().unwrap().service_names.clone()
    }

    /// The spans of `trace_id` once `done` says they are all there (or after `within`).
    pub async fn trace(&self, trace_id: &str, within: Duration, done: impl Fn(&[Span]) -> bool) -> Vec<Span> {
        let started = Instant::now();
        loop {
            let spans: Vec<Span> = self.spans().into_iter().filter(|s| s.trace_id == trace_id).collect();
            if done(&spans) || started.elapsed() > within {
                return spans;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn export(State(shared): State<Shared>, body: Bytes) -> (StatusCode, Vec<u8>) {
    let behaviour = *shared.behaviour.lock().unwrap();
    {
        let mut received = shared.received.lock().unwrap();
        received.exports += 1;
        received.bytes += body.len();
    }
    match behaviour {
        Behaviour::Refuse => return (StatusCode::SERVICE_UNAVAILABLE, Vec::new()),
        Behaviour::BlackHole => std::future::pending::<()>().await,
        Behaviour::Accept => {}
    }
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        return (StatusCode::BAD_REQUEST, Vec::new());
    };
    keep(&shared, request);
    (StatusCode::OK, ExportTraceServiceResponse::default().encode_to_vec())
}

/// The gRPC receiver: OpenTelemetry's own service definition.
struct GrpcReceiver(Shared);

#[tonic::async_trait]
impl TraceService for GrpcReceiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.0.received.lock().unwrap().exports += 1;
        keep(&self.0, request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// The spans of an export, as the tests read them.
fn keep(shared: &Shared, request: ExportTraceServiceRequest) {
    let mut received = shared.received.lock().unwrap();
    for resource_spans in request.resource_spans {
        if let Some(resource) = &resource_spans.resource {
            let attributes = attributes(&resource.attributes);
            if let Some(name) = attributes.get("service.name") {
                received.service_names.push(name.clone());
            }
        }
        for scope in resource_spans.scope_spans {
            for span in scope.spans {
                received.spans.push(Span {
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    name: span.name,
                    kind: span.kind,
                    attributes: attributes(&span.attributes),
                    events: span
                        .events
                        .iter()
                        .map(|e| (e.name.clone(), attributes(&e.attributes)))
                        .collect(),
                    links: span.links.iter().map(|l| (hex(&l.trace_id), hex(&l.span_id))).collect(),
                    status: span.status.map_or(0, |s| s.code),
                    start_ns: span.start_time_unix_nano,
                    end_ns: span.end_time_unix_nano,
                });
            }
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn attributes(pairs: &[KeyValue]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|pair| {
            let value = match pair.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(Value::StringValue(s)) => s.clone(),
                Some(Value::BoolValue(b)) => b.to_string(),
                Some(Value::IntValue(i)) => i.to_string(),
                Some(Value::DoubleValue(d)) => d.to_string(),
                Some(other) => format!("{other:?}"),
                None => String::new(),
            };
            (pair.key.clone(), value)
        })
        .collect()
}
