//! Finding tensors by name in an item (or in predict's batch).

use crate::{ItemError, Tensor};

/// Lookup by name in a list of tensors: an item, or the batch that predict receives.
///
/// ```
/// use tensorplug_guest::{Tensor, TensorsExt};
/// let item = vec![Tensor::from_f32("x", &[1], &[0.5])];
/// assert_eq!(item.input("x")?.to_f32()?, [0.5]);
/// assert_eq!(item.input("y").unwrap_err().message, "missing input 'y'");
/// # Ok::<(), tensorplug_guest::ItemError>(())
/// ```
pub trait TensorsExt {
    /// The tensor called `name`, if any.
    fn find(&self, name: &str) -> Option<&Tensor>;

    /// The tensor called `name`.
    ///
    /// # Errors
    /// 400 `"missing input 'name'"`.
    fn input(&self, name: &str) -> Result<&Tensor, ItemError>;

    /// Removes and returns the tensor called `name`, to reuse its buffers.
    ///
    /// # Errors
    /// 400 `"missing input 'name'"`.
    fn take_input(&mut self, name: &str) -> Result<Tensor, ItemError>;
}

impl TensorsExt for Vec<Tensor> {
    fn find(&self, name: &str) -> Option<&Tensor> {
        self.iter().find(|t| t.name == name)
    }

    fn input(&self, name: &str) -> Result<&Tensor, ItemError> {
        self.find(name).ok_or_else(|| missing(name))
    }

    fn take_input(&mut self, name: &str) -> Result<Tensor, ItemError> {
        let index = self.iter().position(|t| t.name == name).ok_or_else(|| missing(name))?;
        Ok(self.swap_remove(index))
    }
}

fn missing(name: &str) -> ItemError {
    ItemError::bad_request(format!("missing input '{name}'"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn take_removes() {
        let mut item = vec![Tensor::from_u8("a", &[], &[1]), Tensor::from_u8("b", &[], &[2])];
        assert_eq!(item.take_input("a").unwrap().data, [1]);
        assert_eq!(item.len(), 1);
        assert!(item.find("a").is_none());
        assert_eq!(item.take_input("a").unwrap_err().status, 400);
    }
}
