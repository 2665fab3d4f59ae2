//! Reading BYTES tensors: each element is a 4-byte little-endian length and that many
//! bytes, the layout of the V2 binary tensor data extension.

use std::iter::FusedIterator;

use crate::{Datatype, ItemError, Tensor};

/// The elements of a BYTES tensor, from [`Tensor::bytes_elements`].
#[derive(Debug, Clone)]
pub struct BytesElements<'a> {
    rest: &'a [u8],
    remaining: usize,
}

impl<'a> Iterator for BytesElements<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        // Validated by `bytes_elements`, so the slicing cannot fail.
        let (element, rest) = split_element(self.rest)?;
        self.rest = rest;
        self.remaining -= 1;
        Some(element)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl ExactSizeIterator for BytesElements<'_> {}
impl FusedIterator for BytesElements<'_> {}

impl Tensor {
    /// The elements of a BYTES tensor, each as a byte slice.
    ///
    /// # Errors
    /// 400 when the datatype is not BYTES, or the data is not exactly as many
    /// length-prefixed elements as the shape says.
    pub fn bytes_elements(&self) -> Result<BytesElements<'_>, ItemError> {
        self.expect_datatype(Datatype::Bytes)?;
        let expected = self.element_count();
        let mut rest = self.data.as_slice();
        let mut found = 0u64;
        while !rest.is_empty() {
            let Some((_, tail)) = split_element(rest) else {
                return Err(self.error(format!("BYTES element {found} is truncated")));
            };
            rest = tail;
            found += 1;
        }
        if found != expected {
            return Err(self.error(format!(
                "shape {} needs {expected} BYTES elements, got {found}",
                crate::format_shape(&self.shape)
            )));
        }
        let remaining = usize::try_from(found).map_err(|_| self.error("too many elements"))?;
        Ok(BytesElements {
            rest: &self.data,
            remaining,
        })
    }

    /// The elements of a BYTES tensor as UTF-8 strings.
    ///
    /// # Errors
    /// As [`Tensor::bytes_elements`], or 400 when an element is not UTF-8.
    pub fn to_strings(&self) -> Result<Vec<String>, ItemError> {
        self.bytes_elements()?
            .enumerate()
            .map(|(i, b)| {
                std::str::from_utf8(b)
                    .map(str::to_owned)
                    .map_err(|_| self.error(format!("BYTES element {i} is not UTF-8")))
            })
            .collect()
    }
}

/// Splits one length-prefixed element off the front of `data`.
fn split_element(data: &[u8]) -> Option<(&[u8], &[u8])> {
    let (len, rest) = data.split_first_chunk::<4>()?;
    let len = usize::try_from(u32::from_le_bytes(*len)).ok()?;
    (rest.len() >= len).then(|| rest.split_at(len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let t = Tensor::from_bytes("s", &[3], ["ab", "", "ünï"]);
        assert_eq!(&t.data[..6], &[2, 0, 0, 0, b'a', b'b']);
        let elements: Vec<&[u8]> = t.bytes_elements().unwrap().collect();
        assert_eq!(elements, [&b"ab"[..], b"", "ünï".as_bytes()]);
        assert_eq!(t.to_strings().unwrap(), ["ab", "", "ünï"]);
        assert_eq!(t.bytes_elements().unwrap().len(), 3);
    }

    #[test]
    fn malformed_data_is_400() {
        let truncated = Tensor::new("s", Datatype::Bytes, &[1], vec![5, 0, 0, 0, b'x']);
        assert_eq!(
            truncated.bytes_elements().unwrap_err().message,
            "s: BYTES element 0 is truncated"
        );
        let too_few = Tensor::from_bytes("s", &[1], [b"x"]);
        let too_few = Tensor {
            shape: vec![2],
            ..too_few
        };
        assert_eq!(
            too_few.validate().unwrap_err().message,
            "s: shape [2] needs 2 BYTES elements, got 1"
        );
        let not_utf8 = Tensor::from_bytes("s", &[1], [[0xff]]);
        assert_eq!(
            not_utf8.to_strings().unwrap_err().message,
            "s: BYTES element 0 is not UTF-8"
        );
        assert!(Tensor::from_f32("f", &[1], &[1.0]).bytes_elements().is_err());
    }
}
