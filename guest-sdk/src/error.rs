//! Building [`ItemError`], [`ItemFailure`] and [`Prediction`] values.

use crate::{ItemError, ItemFailure, Prediction, Tensor};

impl ItemError {
    /// An error with any status; the host answers statuses outside 400..=599 as 500.
    pub fn new(status: u16, message: impl Into<String>) -> Self {
        ItemError {
            status,
            message: message.into(),
        }
    }

    /// 400 Bad Request: the input is malformed (wrong shape, missing tensor, ...).
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, message)
    }

    /// 422 Unprocessable Content: the input is well-formed but its values are unacceptable.
    pub fn unprocessable(message: impl Into<String>) -> Self {
        Self::new(422, message)
    }

    /// 500 Internal Server Error: the plugin itself is at fault.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, message)
    }

    /// This error as the failure of the batch item at `index`.
    pub fn at(self, index: u32) -> ItemFailure {
        ItemFailure { index, error: self }
    }
}

impl ItemFailure {
    /// The failure of the batch item at `index` (0-based, in batch order).
    pub fn new(index: u32, error: ItemError) -> Self {
        ItemFailure { index, error }
    }
}

impl Prediction {
    /// A prediction in which every item succeeded.
    pub fn new(outputs: Vec<Tensor>) -> Self {
        Prediction {
            outputs,
            failures: Vec::new(),
        }
    }

    /// A prediction in which the items listed in `failures` failed; their rows in
    /// `outputs` are ignored by the host.
    pub fn with_failures(outputs: Vec<Tensor>, failures: Vec<ItemFailure>) -> Self {
        Prediction { outputs, failures }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constructors_set_status() {
        assert_eq!(ItemError::bad_request("x").status, 400);
        assert_eq!(ItemError::unprocessable("x").status, 422);
        assert_eq!(ItemError::internal("x").status, 500);
        let e = ItemError::new(418, "teapot");
        assert_eq!((e.status, e.message.as_str()), (418, "teapot"));
        let f = ItemError::bad_request("no").at(3);
        assert_eq!(f.index, 3);
        assert_eq!(f.error, ItemError::bad_request("no"));
    }
}
