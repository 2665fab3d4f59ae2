//! Turning errors and encoded bodies into HTTP responses.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::protocol::encode_error;

/// The V2 header that gives the JSON part's length in a binary-extension body.
pub const HEADER_CONTENT_LENGTH: &str = "inference-header-content-length";

/// A JSON body with a status.
pub fn json(status: StatusCode, body: Vec<u8>) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))],
        body,
    )
        .into_response()
}

/// `{"error": message}` with a status.
pub fn error(status: StatusCode, message: &str) -> Response {
    json(status, encode_error(message))
}
