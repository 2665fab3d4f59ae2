//! How a request reaches the model: REST (JSON, or binary tensor data), gRPC, NATS
//! JetStream, or in-process. Each takes an [`InferRequest`] and gives back a [`Reply`] (an
//! answer with outputs or per-item outcomes) or a [`Failure`] of the whole request, saying
//! whether a retry could help; and before the run, checks that the model is there
//! ([`ModelInfo`]). REST and NATS answer with the same bodies, read by [`rest_reply`].

mod grpc;
pub(crate) mod local;
mod nats;
mod rest;

use std::time::Duration;

use super::options::{Options, Target, TransportKind};
use crate::model::outcome::{ItemError, ItemOutcome};
use crate::model::tensor::Tensor;
use crate::protocol::client::{decode_answer, ServerAnswer};
use crate::protocol::InferRequest;
use crate::traces::ClientTrace;

/// Why the run cannot start: the model is not there, the server cannot be reached, a
/// flag the transport reads is malformed.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("{0}")]
    Usage(String),
    #[error("cannot reach the server at {url}: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("the server at {url} does not serve the model: {reason}")]
    Model { url: String, reason: String },
    #[error("model '{model}' in {repository}: {reason}")]
    Load {
        model: String,
        repository: String,
        reason: String,
    },
}

/// What the run needs to know about the model before it starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelInfo {
    pub name: String,
    /// The version answers come from (the requested one, or the one served).
    pub version: String,
    /// Whether requests carry a batch dimension (every input's first dimension is the
    /// item count), so that lines can be merged.
    pub batches: bool,
}

/// A request's answer.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Reply {
    /// Every item succeeded (HTTP 200, gRPC OK): the outputs as answered.
    Success {
        model_name: String,
        model_version: String,
        outputs: Vec<Tensor>,
    },
    /// Some items failed: every item's outcome, a successful one's outputs without the
    /// batch dimension (HTTP 207, and in-process).
    Items {
        model_name: String,
        model_version: String,
        results: Vec<ItemOutcome>,
    },
    /// Some items failed, and only their statuses came back (gRPC's item-status trailer).
    Statuses { results: Vec<Result<(), ItemError>> },
}

/// A request that failed as a whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Failure {
    /// The HTTP status (gRPC codes mapped back; 502 when no answer came or it could not
    /// be read, 504 when none came in time).
    pub status: u16,
    pub message: String,
    /// A connection error, a 503 or a 504: the same request may succeed later.
    pub retryable: bool,
    /// How long the server asked to wait (`Retry-After`).
    pub retry_after: Option<Duration>,
}

impl Failure {
    /// A failure the server answered with `status`; retryable when it is 503 or 504.
    pub(crate) fn answered(status: u16, message: String, retry_after: Option<Duration>) -> Self {
        Failure {
            status,
            message,
            retryable: status == 503 || status == 504,
            retry_after,
        }
    }

    /// No (readable) answer: the connection failed, or the answer was garbled.
    pub(crate) fn no_answer(message: String, retryable: bool) -> Self {
        Failure {
            status: 502,
            message,
            retryable,
            retry_after: None,
        }
    }

    /// No answer within the time limit.
    pub(crate) fn timed_out(timeout: Duration) -> Self {
        Failure {
            status: 504,
            message: format!("no answer within {} s (--timeout)", timeout.as_secs_f64()),
            retryable: true,
            retry_after: None,
        }
    }
}

/// One of the four ways to reach the model.
pub(crate) enum Transport {
    Rest(rest::Rest),
    Grpc(grpc::Grpc),
    /// Boxed: its JetStream context makes it twice the others' size.
    Nats(Box<nats::Nats>),
    Local(local::Local),
}

impl Transport {
    /// Connects (or loads the model) and checks that the model is served, retrying while
    /// the server cannot be reached or answers 503 (a model still loading), as often as
    /// `--retries` allows.
    pub(crate) async fn connect(options: &Options) -> Result<Transport, SetupError> {
        match &options.target {
            Target::Server {
                url,
                transport: TransportKind::Rest,
            } => Ok(Transport::Rest(rest::Rest::connect(url, options).await?)),
            Target::Server {
                url,
                transport: TransportKind::Grpc,
            } => {
                if options.binary_data {
                    tracing::info!("--binary-data has no effect over gRPC: tensors always travel as raw bytes");
                }
                Ok(Transport::Grpc(grpc::Grpc::connect(url, options).await?))
            }
            Target::Server {
                url,
                transport: TransportKind::Nats,
            } => Ok(Transport::Nats(Box::new(nats::Nats::connect(url, options).await?))),
            Target::InProcess { repository, cache_dir } => Ok(Transport::Local(
                local::Local::load(repository, cache_dir.as_deref(), options).await?,
            )),
        }
    }

    pub(crate) fn info(&self) -> &ModelInfo {
        match self {
            Transport::Rest(t) => &t.info,
            Transport::Grpc(t) => &t.info,
            Transport::Nats(t) => &t.info,
            Transport::Local(t) => &t.info,
        }
    }

    /// The in-process transport, if this is it: there a group of lines is not merged
    /// into one request but handed over as the lines' own requests
    /// ([`local::Local::infer_many`]), and the serving batcher stacks their items (a merged
    /// request would be split into items there and stacked again, its answer split back).
    /// Over a wire, merging saves round trips.
    pub(crate) fn in_process(&self) -> Option<&local::Local> {
        match self {
            Transport::Local(local) => Some(local),
            Transport::Rest(_) | Transport::Grpc(_) | Transport::Nats(_) => None,
        }
    }

    /// Sends one request, carrying `trace`'s context, and waits (at most `--timeout`) for
    /// its answer; `trace` ends with the answer's status.
    pub(crate) async fn infer(&self, request: InferRequest, trace: ClientTrace) -> Result<Reply, Failure> {
        let reply = match self {
            Transport::Rest(t) => t.infer(request, &trace).await,
            Transport::Grpc(t) => t.infer(request, &trace).await,
            Transport::Nats(t) => t.infer(request, &trace).await,
            Transport::Local(t) => t.infer(request, &trace).await,
        };
        trace.finish(reply_status(&reply));
        reply
    }

    /// The transport's name, as `--transport` gives it (in-process: `local`).
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Transport::Rest(_) => "rest",
            Transport::Grpc(_) => "grpc",
            Transport::Nats(_) => "nats",
            Transport::Local(_) => "local",
        }
    }

    /// Lets go of connections; in-process, stops the model's instances.
    pub(crate) async fn close(&self) {
        match self {
            Transport::Local(local) => local.close().await,
            Transport::Nats(nats) => nats.close().await,
            Transport::Rest(_) | Transport::Grpc(_) => {}
        }
    }
}

/// A REST answer read as the run reads it: a 200's outputs, a 207's per-item outcomes, or
/// the whole request's failure for any other `status` (with the server's `retry_after`,
/// if it gave one). `json_header_len`: the answer's `Inference-Header-Content-Length`.
/// One reading for REST and NATS, whose answers are the same bodies under the same
/// statuses, so that a line gets the same answer line over either.
pub(crate) fn rest_reply(
    status: u16,
    body: &[u8],
    json_header_len: Option<usize>,
    retry_after: Option<Duration>,
) -> Result<Reply, Failure> {
    match decode_answer(status, body, json_header_len) {
        Ok(ServerAnswer::Success {
            model_name,
            model_version,
            outputs,
            ..
        }) => Ok(Reply::Success {
            model_name,
            model_version,
            outputs,
        }),
        Ok(ServerAnswer::MultiStatus {
            model_name,
            model_version,
            results,
        }) => Ok(Reply::Items {
            model_name,
            model_version,
            results,
        }),
        Ok(ServerAnswer::Error { message }) => Err(Failure::answered(status, message, retry_after)),
        Err(error) => Err(Failure::no_answer(
            format!("the server's answer (HTTP {status}) could not be read: {error}"),
            false,
        )),
    }
}

/// The HTTP-style status a reply stands for (0: no answer came).
pub(crate) fn reply_status(reply: &Result<Reply, Failure>) -> u16 {
    match reply {
        Ok(Reply::Success { .. }) => 200,
        Ok(Reply::Items { .. } | Reply::Statuses { .. }) => 207,
        Err(failure) => failure.status,
    }
}

/// `url` as given, or `http://` + it when it has no scheme (`host:port`, as `mlserver
/// infer` takes it), without a trailing `/`.
pub(crate) fn base_url(url: &str) -> String {
    let url = url.trim().trim_end_matches('/');
    if url.contains("://") {
        url.to_owned()
    } else {
        format!("http://{url}")
    }
}

/// `Name: value` headers, checked.
pub(crate) fn parse_headers(headers: &[String]) -> Result<Vec<(String, String)>, SetupError> {
    headers
        .iter()
        .map(|header| {
            let (name, value) = header
                .split_once(':')
                .ok_or_else(|| SetupError::Usage(format!("--request-headers {header:?}: expected `Name: value`")))?;
            let name = name.trim();
            if name.is_empty() {
                return Err(SetupError::Usage(format!(
                    "--request-headers {header:?}: the name is empty"
                )));
            }
            Ok((name.to_owned(), value.trim().to_owned()))
        })
        .collect()
}

/// Waits before the next try of a setup step (attempt `n`, from 1).
async fn setup_backoff(n: u32) {
    tokio::time::sleep(super::retry::backoff(n)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_without_a_scheme_are_http() {
        assert_eq!(base_url("localhost:8080"), "http://localhost:8080");
        assert_eq!(base_url("https://models.example/api/"), "https://models.example/api");
    }

    #[test]
    fn headers_are_name_colon_value() {
        assert_eq!(
            parse_headers(&["Authorization: Bearer x:y".into()]).unwrap(),
            vec![("Authorization".into(), "Bearer x:y".into())]
        );
        assert!(parse_headers(&["no colon".into()]).is_err());
        assert!(parse_headers(&[": v".into()]).is_err());
    }

    #[test]
    fn a_rest_answer_is_outputs_outcomes_or_a_failure() {
        let success = br#"{"model_name":"m","model_version":"2","outputs":[
            {"name":"y","datatype":"INT64","shape":[1],"data":[7]}]}"#;
        match rest_reply(200, success, None, None) {
            Ok(Reply::Success {
                model_name,
                model_version,
                outputs,
            }) => {
                assert_eq!((model_name.as_str(), model_version.as_str()), ("m", "2"));
                assert_eq!(outputs.len(), 1);
            }
            other => panic!("{other:?}"),
        }
        let multi = br#"{"model_name":"m","model_version":"2","results":[
            {"status":200,"outputs":[{"name":"y","datatype":"INT64","shape":[1,1],"data":[7]}]},
            {"status":400,"error":"bad item"}]}"#;
        match rest_reply(207, multi, None, None) {
            Ok(Reply::Items { results, .. }) => {
                assert!(results[0].is_ok());
                assert_eq!(
                    results[1].as_ref().map(drop).map_err(|e| e.message.as_str()),
                    Err("bad item")
                );
            }
            other => panic!("{other:?}"),
        }
        let wait = Some(Duration::from_secs(2));
        assert_eq!(
            rest_reply(503, br#"{"error":"loading"}"#, None, wait),
            Err(Failure::answered(503, "loading".into(), wait))
        );
        assert!(!rest_reply(400, br#"{"error":"no"}"#, None, None).unwrap_err().retryable);
        let garbled = rest_reply(200, b"not json", None, None).unwrap_err();
        assert_eq!((garbled.status, garbled.retryable), (502, false));
        assert!(garbled.message.contains("could not be read"), "{}", garbled.message);
    }
}
