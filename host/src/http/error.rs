//! [`HttpError`]: what the REST edge refuses on its own (a body it cannot read as it is,
//! or one too large), beside the [`ServeError`]s every edge shares.

use crate::api::ServeError;

/// Why the REST edge refused a request.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// A body the server cannot read as it is: a media type other than JSON (or the
    /// binary tensor extension's), or a content or transfer coding it does not decode.
    #[error("{0}")]
    UnsupportedMediaType(String),
    #[error("request body is larger than the limit of {limit} bytes")]
    BodyTooLarge { limit: usize },
    #[error(transparent)]
    Serve(#[from] ServeError),
}
