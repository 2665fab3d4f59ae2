//! Request-level errors, and their one mapping to an HTTP status.
//!
//! Item-level failures are not here: they travel as [`crate::outcome::ItemError`] with
//! their own status. These are the failures decided before any item runs.

use axum::http::StatusCode;

use crate::protocol::ProtocolError;
use crate::serving::{RepositoryError, SubmitError};

/// Why a whole request failed.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
    #[error("{0}")]
    InvalidInput(String),
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
    /// A body the server cannot read as it is: a media type other than JSON (or the
    /// binary tensor extension's), or a content or transfer coding it does not decode.
    #[error("{0}")]
    UnsupportedMediaType(String),
    #[error("request body is larger than the limit of {limit} bytes")]
    BodyTooLarge { limit: usize },
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

impl ServeError {
    /// The HTTP status of this error: the only place that decides it.
    pub fn http_status(&self) -> StatusCode {
        match self {
            ServeError::Protocol(_) | ServeError::InvalidInput(_) => StatusCode::BAD_REQUEST,
            ServeError::ModelNotFound(_) | ServeError::VersionNotFound { .. } => StatusCode::NOT_FOUND,
            ServeError::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ServeError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ServeError::ModelNotReady(_) | ServeError::Queue(_) => StatusCode::SERVICE_UNAVAILABLE,
            ServeError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ServeError::Unauthorized => StatusCode::UNAUTHORIZED,
            ServeError::Forbidden(_) => StatusCode::FORBIDDEN,
            ServeError::Repository(e) => match e {
                RepositoryError::InvalidName(_) => StatusCode::BAD_REQUEST,
                RepositoryError::NoSuchFolder(_) | RepositoryError::NotLoaded(_) => StatusCode::NOT_FOUND,
                RepositoryError::Load { .. } => StatusCode::INTERNAL_SERVER_ERROR,
            },
        }
    }

    /// Seconds a client should wait before retrying, for overload answers.
    pub fn retry_after(&self) -> Option<u32> {
        match self {
            ServeError::Queue(SubmitError::QueueFull { .. }) | ServeError::ModelNotReady(_) => Some(1),
            _ => None,
        }
    }
}
