//! [`ServeError`]: why a whole request failed, whatever edge it came through.
//!
//! Item-level failures are not here: they travel as
//! [`ItemError`](crate::model::outcome::ItemError) with their own status. These are the
//! failures decided before any item runs. Each edge maps them to its own codes in one
//! place (the HTTP edge in its `status` module).

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
