//! The REST edge's statuses: a protocol-neutral status (a [`ServeError`]'s, an
//! [`ItemError`]'s) is already an HTTP status number, so it is only converted; the edge's
//! own refusals ([`HttpError`]) get theirs here; and errors become answers.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::error::HttpError;
use super::response;
use crate::api::ServeError;
use crate::model::outcome::ItemError;

/// The HTTP status of a protocol-neutral status number (always 100..=599 by construction).
pub fn http_status(status: u16) -> StatusCode {
    StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// The HTTP status of an item's error: its own.
pub fn item_status(error: &ItemError) -> StatusCode {
    http_status(error.status)
}

impl HttpError {
    /// The HTTP status number this refusal is answered with.
    pub fn status(&self) -> u16 {
        match self {
            HttpError::UnsupportedMediaType(_) => 415,
            HttpError::Serve(error) => error.status(),
        }
    }
}

impl IntoResponse for ServeError {
    fn into_response(self) -> Response {
        let mut response = response::error(http_status(self.status()), &self.to_string());
        if let Some(wait) = self.retry_after() {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(wait.as_secs()));
        }
        response
    }
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        match self {
            HttpError::Serve(error) => error.into_response(),
            other => response::error(http_status(other.status()), &other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serving::SubmitError;

    #[test]
    fn the_edges_own_refusals_and_the_shared_ones_answer_their_statuses() {
        let unsupported = HttpError::UnsupportedMediaType("text/plain".into()).into_response();
        assert_eq!(unsupported.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
        let large = HttpError::from(ServeError::BodyTooLarge { limit: 1 }).into_response();
        assert_eq!(large.status(), StatusCode::PAYLOAD_TOO_LARGE);
        let full = HttpError::from(ServeError::Queue(SubmitError::QueueFull {
            model: "m".into(),
            capacity: 1,
        }))
        .into_response();
        assert_eq!(full.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(full.headers()[header::RETRY_AFTER], "1");
        let absent = ServeError::ModelNotFound("m".into()).into_response();
        assert_eq!(absent.status(), StatusCode::NOT_FOUND);
        assert!(absent.headers().get(header::RETRY_AFTER).is_none());
    }
}
