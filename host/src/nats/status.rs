//! The queue edge's statuses: what becomes of a delivered message once the inference
//! path has answered it with a protocol-neutral status, in one table.

use std::time::Duration;

use crate::serving::EdgeLabel;

/// The queue edge's requests, counted by the status their answer carries.
pub static NATS_EDGE: EdgeLabel = EdgeLabel {
    name: "nats",
    status_name: None,
};

/// What is done with a delivered message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Disposition {
    /// Answer, then acknowledge: done.
    Ack,
    /// Answer, then terminate: the request cannot succeed as it is (a client error), so
    /// it is never delivered again.
    Term,
    /// No answer yet: hand the message back to the stream, delivered again after the delay
    /// (to this replica or another).
    Retry(Duration),
}

/// What becomes of a message answered `status` on its `delivered`-th delivery (from 1),
/// of at most `max_deliver`. `retry_after` is the inference path's hint for a retryable
/// failure; `nak_delay` the configured wait.
pub fn disposition(
    status: u16,
    retry_after: Option<Duration>,
    delivered: u64,
    max_deliver: u32,
    nak_delay: Duration,
) -> Disposition {
    match status {
        // Overloaded, loading or shutting down: worth another delivery while there is one.
        503 if delivered < u64::from(max_deliver) => Disposition::Retry(retry_after.unwrap_or(nak_delay)),
        400..=499 => Disposition::Term,
        // Answered: a success, some items failed, or a failure the server answered (an
        // item's 500 or 504). Delivering it again would run it again for the same answer.
        _ => Disposition::Ack,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DELAY: Duration = Duration::from_millis(700);

    #[test]
    fn every_status_has_its_disposition() {
        let second = Some(Duration::from_secs(1));
        let cases = [
            (200, None, 1, Disposition::Ack),
            (207, None, 1, Disposition::Ack),
            (400, None, 1, Disposition::Term),
            (404, None, 1, Disposition::Term),
            (413, None, 1, Disposition::Term),
            (422, None, 3, Disposition::Term),
            (500, None, 1, Disposition::Ack),
            (504, None, 1, Disposition::Ack),
            (503, second, 1, Disposition::Retry(Duration::from_secs(1))),
            (503, None, 4, Disposition::Retry(DELAY)),
            // The last delivery answers the overload rather than giving up in silence.
            (503, second, 5, Disposition::Ack),
        ];
        for (status, retry_after, delivered, expected) in cases {
            assert_eq!(
                disposition(status, retry_after, delivered, 5, DELAY),
                expected,
                "{status} on delivery {delivered}"
            );
        }
    }
}
