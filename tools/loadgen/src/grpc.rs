//! One simulated gRPC client: its own HTTP/2 connection (one tonic `Channel`) on which
//! `ModelInfer` calls go back to back, one at a time (a closed loop, as client.rs does
//! for REST: the next call leaves when the previous one has its answer).
//!
//! The requests were converted from JSON once, before the run (convert.rs); each call
//! sends a copy of one of them. A call the server ends with a status other than OK is an
//! error whose latency is counted, as a non-2xx answer is for REST. A transport failure
//! (tonic makes it a status too, with the failure as its source) or no answer within the
//! time-out is an error without latency; the channel reconnects by itself on the next
//! call. Connecting the channel before the first call is not part of any latency.

use std::error::Error as _;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result};
use hdrhistogram::Histogram;
use tensorplug::protocol::grpc::proto::grpc_inference_service_client::GrpcInferenceServiceClient;
use tensorplug::protocol::grpc::proto::ModelInferRequest;
use tokio::time::Instant;
use tonic::transport::{Channel, Endpoint};
use tonic::Status;

use crate::client::{connect_counted, Schedule};
use crate::report::ClientStats;

/// The largest answer accepted (tonic's default is 4 MiB).
const MAX_ANSWER_BYTES: usize = 256 * 1024 * 1024;

/// Where and what to send; shared by every client.
pub struct Target {
    /// `http://ADDR`, with TCP_NODELAY; each client connects its own channel from it.
    endpoint: Endpoint,
    addr: SocketAddr,
    /// Sent in rotation (client `i` starts at request `i`).
    requests: Vec<ModelInferRequest>,
}

impl Target {
    /// `addr` must already be checked to be a loopback address; `requests` is not empty.
    pub fn new(addr: SocketAddr, requests: Vec<ModelInferRequest>) -> Result<Self> {
        let endpoint = Endpoint::from_shared(format!("http://{addr}"))
            .with_context(|| format!("no gRPC endpoint for {addr}"))?
            .tcp_nodelay(true);
        Ok(Self {
            endpoint,
            addr,
            requests,
        })
    }
}

type Client = GrpcInferenceServiceClient<Channel>;

/// Runs client number `index` until `schedule.end`; returns what it counted.
pub async fn run(index: usize, target: Arc<Target>, schedule: Schedule, histogram: Histogram<u64>) -> ClientStats {
    let mut stats = ClientStats::new(histogram);
    let mut next_request = index;
    let mut client: Option<Client> = None;

    loop {
        if Instant::now() >= schedule.end {
            break;
        }
        if client.is_none() {
            client = connect_counted(&schedule, &mut stats, target.addr, connect(&target)).await;
            if client.is_none() {
                continue;
            }
        }
        let Some(connected) = client.as_mut() else { continue };
        let Some(request) = target.requests.get(next_request % target.requests.len().max(1)) else {
            break;
        };
        let request = request.clone();
        next_request = next_request.wrapping_add(1);

        let started = Instant::now();
        if started >= schedule.end {
            break;
        }
        let counted = started >= schedule.measure_from;
        let outcome = tokio::time::timeout(schedule.timeout, connected.model_infer(request)).await;
        let latency = started.elapsed();
        match outcome {
            Ok(Ok(_answer)) => {
                if counted {
                    stats.count_success(latency);
                }
            }
            Ok(Err(status)) if status.source().is_some() => stats.count_error(counted, describe(&status)),
            Ok(Err(status)) => {
                if counted {
                    stats.count_failure(latency, || describe(&status));
                }
            }
            Err(_) => stats.count_error(counted, format!("no complete answer within {:?}", schedule.timeout)),
        }
    }
    stats
}

/// Opens the client's own channel: one HTTP/2 connection, connected now.
async fn connect(target: &Target) -> Result<Client> {
    let channel = target
        .endpoint
        .connect()
        .await
        .with_context(|| format!("connecting to {} (gRPC)", target.addr))?;
    Ok(GrpcInferenceServiceClient::new(channel).max_decoding_message_size(MAX_ANSWER_BYTES))
}

/// `gRPC status InvalidArgument (3): message`, plus the cause of a client-side failure.
fn describe(status: &Status) -> String {
    let code = status.code();
    let mut text = format!("gRPC status {code:?} ({}): {}", i32::from(code), status.message());
    let mut source = status.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_described() {
        assert_eq!(
            describe(&Status::not_found("no model 'x'")),
            "gRPC status NotFound (5): no model 'x'"
        );
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset by peer");
        let status = Status::from_error(Box::new(io));
        assert_eq!(describe(&status), "gRPC status Unknown (2): reset by peer");
        let mut status = Status::unavailable("transport error");
        status.set_source(Arc::new(std::io::Error::other("connection refused")));
        assert_eq!(
            describe(&status),
            "gRPC status Unavailable (14): transport error: connection refused"
        );
    }
}
