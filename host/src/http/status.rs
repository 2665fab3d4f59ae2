//! The one mapping from errors to HTTP statuses: request-level [`ServeError`]s, and
//! item-level [`ItemError`]s (whose status the plugin or the pipeline chose).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::response;
use crate::api::ServeError;
use crate::model::outcome::ItemError;
use crate::serving::{RepositoryError, SubmitError};

/// The HTTP status of a request-level error.
pub fn status_of(error: &ServeError) -> StatusCode {
    match error {
        ServeError::Protocol(_) | ServeError::InvalidInput(_) | ServeError::Unreadable(_) => StatusCode::BAD_REQUEST,
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

/// The HTTP status of an item's error: its own (always 400..=599 by construction).
pub fn item_status(error: &ItemError) -> StatusCode {
    StatusCode::from_u16(error.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// Seconds a client should wait before retrying, for overload answers.
fn retry_after(error: &ServeError) -> Option<u32> {
    match error {
        ServeError::Queue(SubmitError::QueueFull { .. }) | ServeError::ModelNotReady(_) => Some(1),
        _ => None,
    }
}

impl IntoResponse for ServeError {
    fn into_response(self) -> Response {
        let status = status_of(&self);
        let mut response = response::error(status, &self.to_string());
        if let Some(seconds) = retry_after(&self) {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}
