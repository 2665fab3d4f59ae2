//! [`HttpError`]: what the REST edge refuses on its own (a body whose media type or coding
//! it cannot read), beside the [`ServeError`]s every edge shares (a body too large among them).

use crate::api::ServeError;

/// Why the REST edge refused a request.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// A body the server cannot read as it is: a media type other than JSON (or the
    /// binary tensor extension's), or a content or transfer coding it does not decode.
    #[error("{0}")]
    UnsupportedMediaType(String),
    #[error(transparent)]
    Serve(#[from] ServeError),
}
