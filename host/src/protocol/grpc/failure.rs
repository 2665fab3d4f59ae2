//! The one table between protocol-neutral (HTTP-style) statuses and gRPC codes, both
//! ways: [`code_for`] is how the server answers a status, [`answered_status`] how a client
//! reads a code back as the status the server mapped it from. And the
//! [`ITEM_STATUS_TRAILER`] trailer, from which a client reads every item's status of a
//! multi-item request whose items partly failed (gRPC has no 207; the successful items'
//! outputs do not come back).

use tonic::{Code, Status};

use crate::model::outcome::ItemError;

/// The trailer of a failed answer: a JSON array over the items in request order,
/// `{"status": 200}` or `{"status": 400, "error": "..."}`; an entry with a `count` stands
/// for that many items in a row. Item messages in it are cut to 200 bytes by the server.
pub const ITEM_STATUS_TRAILER: &str = "tensorplug-item-status";

/// Most items a trailer is read as covering.
const MAX_TRAILER_ITEMS: usize = 1 << 24;

/// Every item's status from a failed answer's trailer, if it has one.
pub fn read_item_statuses(status: &Status) -> Option<Vec<Result<(), ItemError>>> {
    #[derive(serde::Deserialize)]
    struct ItemStatus {
        status: u16,
        #[serde(default)]
        error: Option<String>,
        #[serde(default)]
        count: Option<usize>,
    }
    let trailer = status.metadata().get(ITEM_STATUS_TRAILER)?.to_str().ok()?;
    let items: Vec<ItemStatus> = serde_json::from_str(trailer).ok()?;
    let mut statuses = Vec::with_capacity(items.len());
    for item in items {
        let outcome = match item.status {
            200 => Ok(()),
            code => Err(ItemError::new(
                code,
                item.error.unwrap_or_else(|| {
                    format!("item failed ({code}); the server's trailer had no room for its message")
                }),
            )),
        };
        // Never more entries than a request has items (a request is bounded; a count is not).
        let count = item
            .count
            .unwrap_or(1)
            .min(MAX_TRAILER_ITEMS.saturating_sub(statuses.len()));
        statuses.extend(std::iter::repeat_n(outcome, count));
    }
    Some(statuses)
}

/// The gRPC code of a protocol-neutral (HTTP-style) status:
///
/// | HTTP (REST) | gRPC |
/// | --- | --- |
/// | 400, 415, other 4xx | `INVALID_ARGUMENT` |
/// | 401 | `UNAUTHENTICATED` |
/// | 403 | `PERMISSION_DENIED` |
/// | 404 | `NOT_FOUND` |
/// | 408, 504 | `DEADLINE_EXCEEDED` |
/// | 413, 429 | `RESOURCE_EXHAUSTED` |
/// | 500, other 5xx | `INTERNAL` |
/// | 501 | `UNIMPLEMENTED` |
/// | 503 | `UNAVAILABLE` |
pub fn code_for(status: u16) -> Code {
    match status {
        200 => Code::Ok,
        failed => failed_code(failed),
    }
}

/// The gRPC code of a failure's status (always 400..=599 by construction).
fn failed_code(status: u16) -> Code {
    match status {
        401 => Code::Unauthenticated,
        403 => Code::PermissionDenied,
        404 => Code::NotFound,
        408 | 504 => Code::DeadlineExceeded,
        413 | 429 => Code::ResourceExhausted,
        400..=499 => Code::InvalidArgument,
        501 => Code::Unimplemented,
        503 => Code::Unavailable,
        _ => Code::Internal,
    }
}

/// The status (HTTP-numbered, as every edge and the CLI count them) a gRPC code stands
/// for: the server's mapping, read backwards.
pub fn answered_status(code: Code) -> u16 {
    match code {
        Code::Ok => 200,
        Code::InvalidArgument | Code::OutOfRange | Code::FailedPrecondition => 400,
        Code::Unauthenticated => 401,
        Code::PermissionDenied => 403,
        Code::NotFound => 404,
        Code::AlreadyExists | Code::Aborted => 409,
        Code::ResourceExhausted => 413,
        Code::Unimplemented => 501,
        Code::Unavailable => 503,
        Code::DeadlineExceeded => 504,
        Code::Cancelled | Code::Unknown | Code::Internal | Code::DataLoss => 500,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_back_to_the_statuses_the_server_maps_from() {
        assert_eq!(answered_status(Code::InvalidArgument), 400);
        assert_eq!(answered_status(Code::Unavailable), 503);
        assert_eq!(answered_status(Code::DeadlineExceeded), 504);
        assert_eq!(answered_status(Code::Internal), 500);
        assert_eq!(answered_status(Code::NotFound), 404);
    }

    #[test]
    fn the_item_status_trailer_gives_each_item_its_outcome() {
        let mut status = Status::invalid_argument("1 of 2 items failed");
        status.metadata_mut().insert(
            ITEM_STATUS_TRAILER,
            r#"[{"status":200},{"status":422,"error":"rejected"},{"status":500}]"#
                .parse()
                .unwrap(),
        );
        let items = read_item_statuses(&status).unwrap();
        assert_eq!(items[0], Ok(()));
        assert_eq!(items[1], Err(ItemError::new(422, "rejected")));
        assert_eq!(items[2].as_ref().unwrap_err().status, 500);
        assert!(read_item_statuses(&Status::internal("x")).is_none());
    }
}
