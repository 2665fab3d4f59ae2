//! What becomes of one item: its output tensors, or an error with an HTTP-style status.
//!
//! Every layer speaks this: plugins produce item errors, the pipeline adds traps and
//! contract violations, the batcher adds queue timeouts, and the edge turns outcomes into
//! 200/207/4xx/5xx responses.

use crate::model::tensor::Item;

/// Longest item error message kept, in bytes (plugin messages, trap messages with the
/// plugin's output).
pub const MAX_MESSAGE_BYTES: usize = 4096;

/// Why one item failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ItemError {
    /// HTTP status, always within 400..=599.
    pub status: u16,
    pub message: String,
}

impl ItemError {
    /// An error with `status`, clamped to 500 when a plugin gives one outside 400..=599.
    /// An error with `status` (anything outside 400..=599 becomes 500) and `message`,
    /// cut to [`MAX_MESSAGE_BYTES`] with a marker: a plugin's message reaches answers
    /// and logs, and must not flood either.
    pub fn new(status: u16, message: impl Into<String>) -> Self {
        let status = if (400..=599).contains(&status) { status } else { 500 };
        let mut message = message.into();
        if message.len() > MAX_MESSAGE_BYTES {
            let mut end = MAX_MESSAGE_BYTES;
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            let cut = message.len() - end;
            message.truncate(end);
            message.push_str(&format!("... ({cut} more bytes cut)"));
        }
        Self { status, message }
    }

    /// A plugin trapped on this item.
    pub fn trap(message: impl Into<String>) -> Self {
        Self::new(500, message)
    }

    /// A plugin ran past its time limit on this item, or the request's deadline passed.
    pub fn deadline(message: impl Into<String>) -> Self {
        Self::new(504, message)
    }

    /// Whether it is a time limit's or a deadline's (504).
    pub fn is_deadline(&self) -> bool {
        self.status == 504
    }

    /// The model cannot take the item right now (loading, unloading, overloaded).
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(503, message)
    }
}

/// The end of one item's trip through a model.
pub type ItemOutcome = Result<Item, ItemError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_range_statuses_become_500() {
        assert_eq!(ItemError::new(422, "x").status, 422);
        assert_eq!(ItemError::new(200, "x").status, 500);
        assert_eq!(ItemError::new(302, "x").status, 500);
        assert_eq!(ItemError::new(600, "x").status, 500);
    }

    #[test]
    fn long_messages_are_cut_with_a_marker() {
        let message = "é".repeat(10_000); // 20,000 bytes
        let error = ItemError::new(400, message);
        assert!(error.message.len() < MAX_MESSAGE_BYTES + 64, "{}", error.message.len());
        assert!(
            error.message.ends_with("... (15904 more bytes cut)"),
            "{}",
            &error.message[4000..]
        );
    }
}
