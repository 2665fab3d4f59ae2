//! [`ServeError`]: why a whole request failed, whatever edge it came through, and its
//! protocol-neutral status: the one table every edge starts from.
//!
//! Item-level failures are not here: they travel as
//! [`ItemError`](crate::model::outcome::ItemError) with their own status. These are the
//! failures decided before any item runs. A status is an HTTP-style number, because the
//! REST edge answers it as it is and items already carry one; every other edge maps the
//! number to its own codes in one place (the gRPC edge in its `status` module).

use std::time::Duration;

use crate::protocol::ProtocolError;
use crate::serving::items::RequestError;
use crate::serving::{RepositoryError, SubmitError};

/// Why a whole request failed.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
    /// The request could not be read: a malformed header, a broken body stream.
    #[error("{0}")]
    Unreadable(String),
    /// The request body is larger than the server takes (`--max-body-bytes`), whichever
    /// edge carried it.
    #[error("request body is larger than the limit of {limit} bytes")]
    BodyTooLarge { limit: usize },
    /// The request does not fit the model (input names, datatypes, shapes, outputs).
    #[error(transparent)]
    InvalidInput(#[from] RequestError),
    #[error("unknown model '{0}'")]
    ModelNotFound(String),
    #[error("model '{model}' has no version '{version}' (live version: {live})")]
    VersionNotFound {
        model: String,
        version: String,
        live: String,
    },
    #[error("model '{0}' is not ready")]
    ModelNotReady(String),
    /// What only a resident model has (statistics), asked of one on standby.
    #[error("model '{0}' is on standby (not resident): it has no statistics until a request loads it")]
    NotResident(String),
    #[error(transparent)]
    Queue(#[from] SubmitError),
    #[error("{0}")]
    Internal(String),
    #[error("the repository API needs `Authorization: Bearer <admin token>`")]
    Unauthorized,
    #[error("{0}")]
    Forbidden(String),
    #[error(transparent)]
    Repository(#[from] RepositoryError),
}

/// How long a client is asked to wait before retrying an overloaded or loading model.
const RETRY_AFTER: Duration = Duration::from_secs(1);

impl ServeError {
    /// The protocol-neutral status of this failure (an HTTP status number).
    pub fn status(&self) -> u16 {
        match self {
            ServeError::Protocol(_) | ServeError::InvalidInput(_) | ServeError::Unreadable(_) => 400,
            ServeError::Unauthorized => 401,
            ServeError::BodyTooLarge { .. } => 413,
            ServeError::Forbidden(_) => 403,
            ServeError::ModelNotFound(_) | ServeError::VersionNotFound { .. } | ServeError::NotResident(_) => 404,
            ServeError::ModelNotReady(_) | ServeError::Queue(_) => 503,
            ServeError::Internal(_) => 500,
            ServeError::Repository(e) => match e {
                RepositoryError::InvalidName(_) => 400,
                RepositoryError::NoSuchFolder(_) | RepositoryError::NotLoaded(_) => 404,
                // A broken model is the server side's failure, and not worth a retry until
                // its folder changes.
                RepositoryError::Load { .. } | RepositoryError::Broken { .. } => 500,
                RepositoryError::NotResidentYet { .. } => 503,
            },
        }
    }

    /// The same failure again, for each of several requests it fails (the model they all
    /// asked for could not be made resident); what cannot be copied keeps its message.
    pub fn duplicate(&self) -> ServeError {
        match self {
            ServeError::Repository(error) => ServeError::Repository(error.clone()),
            ServeError::VersionNotFound { model, version, live } => ServeError::VersionNotFound {
                model: model.clone(),
                version: version.clone(),
                live: live.clone(),
            },
            ServeError::ModelNotReady(model) => ServeError::ModelNotReady(model.clone()),
            other => ServeError::Internal(other.to_string()),
        }
    }

    /// How long the client should wait before retrying, when a retry soon is worth it: a
    /// full queue, or a model still loading (a model shutting down is not coming back).
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ServeError::Queue(SubmitError::QueueFull { .. })
            | ServeError::ModelNotReady(_)
            | ServeError::Repository(RepositoryError::NotResidentYet { .. }) => Some(RETRY_AFTER),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_request_failure_has_its_status() {
        let queue_full = || {
            ServeError::Queue(SubmitError::QueueFull {
                model: "m".into(),
                capacity: 1,
            })
        };
        let cases: Vec<(ServeError, u16)> = vec![
            (
                ServeError::Protocol(ProtocolError::HeaderLengthExceedsBody {
                    header_len: 2,
                    body_len: 1,
                }),
                400,
            ),
            (ServeError::Unreadable("x".into()), 400),
            (ServeError::BodyTooLarge { limit: 1 }, 413),
            (ServeError::ModelNotFound("m".into()), 404),
            (
                ServeError::VersionNotFound {
                    model: "m".into(),
                    version: "2".into(),
                    live: "1".into(),
                },
                404,
            ),
            (ServeError::ModelNotReady("m".into()), 503),
            (ServeError::NotResident("m".into()), 404),
            (queue_full(), 503),
            (ServeError::Queue(SubmitError::Closed { model: "m".into() }), 503),
            (ServeError::Internal("x".into()), 500),
            (ServeError::Unauthorized, 401),
            (ServeError::Forbidden("x".into()), 403),
            (ServeError::Repository(RepositoryError::InvalidName("../x".into())), 400),
            (ServeError::Repository(RepositoryError::NoSuchFolder("x".into())), 404),
            (ServeError::Repository(RepositoryError::NotLoaded("x".into())), 404),
            (
                ServeError::Repository(RepositoryError::Broken {
                    name: "x".into(),
                    reason: "r".into(),
                }),
                500,
            ),
            (
                ServeError::Repository(RepositoryError::NotResidentYet {
                    name: "x".into(),
                    why: "w".into(),
                }),
                503,
            ),
        ];
        for (error, status) in cases {
            assert_eq!(error.status(), status, "{error:?}");
        }
    }

    #[test]
    fn only_a_full_queue_or_a_loading_model_asks_for_a_retry_in_a_second() {
        let full = ServeError::Queue(SubmitError::QueueFull {
            model: "m".into(),
            capacity: 1,
        });
        assert_eq!(full.retry_after(), Some(Duration::from_secs(1)));
        assert_eq!(
            ServeError::ModelNotReady("m".into()).retry_after(),
            Some(Duration::from_secs(1))
        );
        let closed = ServeError::Queue(SubmitError::Closed { model: "m".into() });
        assert_eq!((closed.status(), closed.retry_after()), (503, None));
        assert_eq!(ServeError::Internal("x".into()).retry_after(), None);
    }
}
