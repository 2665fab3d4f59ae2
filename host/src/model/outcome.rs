//! What becomes of one item: its output tensors, or an error with an HTTP-style status.
//!
//! Every layer speaks this: plugins produce item errors, the pipeline adds traps and
//! contract violations, the batcher adds queue timeouts, and the edge turns outcomes into
//! 200/207/4xx/5xx responses.

use crate::model::tensor::Item;

/// Why one item failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ItemError {
    /// HTTP status, always within 400..=599.
    pub status: u16,
    pub message: String,
}

impl ItemError {
    /// An error with `status`, clamped to 500 when a plugin gives one outside 400..=599.
    pub fn new(status: u16, message: impl Into<String>) -> Self {
        let status = if (400..=599).contains(&status) { status } else { 500 };
        Self {
            status,
            message: message.into(),
        }
    }

    /// A plugin trapped on this item.
    pub fn trap(message: impl Into<String>) -> Self {
        Self::new(500, message)
    }

    /// A plugin ran past its time limit on this item, or the request's deadline passed.
    pub fn deadline(message: impl Into<String>) -> Self {
        Self::new(504, message)
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
}
