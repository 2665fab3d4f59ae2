//! Constructing tensors from Rust values, reading them back, and checking shapes.
//!
//! Every check returns an [`ItemError`] with status 400 and a message that starts with
//! the tensor's name, so a plugin can pass it straight back to the client with `?`.

use std::borrow::Cow;
use std::fmt::Write as _;

use half::f16;

use crate::element::{self, Element};
use crate::{Datatype, ItemError, Tensor};

impl Tensor {
    /// A tensor from its raw parts; see the WIT docs for the layout of `data`.
    pub fn new(name: impl Into<String>, datatype: Datatype, shape: &[u64], data: Vec<u8>) -> Self {
        Tensor {
            name: name.into(),
            datatype,
            shape: shape.to_vec(),
            data,
        }
    }

    /// A tensor of any fixed-size datatype, chosen by the element type `T`.
    ///
    /// # Panics
    /// When `values.len()` is not the product of `shape` (a bug in the plugin).
    pub fn from_values<T: Element>(name: impl Into<String>, shape: &[u64], values: &[T]) -> Self {
        let name = name.into();
        assert_eq!(
            Some(values.len() as u64),
            checked_count(shape),
            "tensor '{name}': shape {} does not hold {} values",
            format_shape(shape),
            values.len()
        );
        Tensor {
            name,
            datatype: T::DATATYPE,
            shape: shape.to_vec(),
            data: element::encode(values),
        }
    }

    /// A BYTES tensor: each element is written as a 4-byte little-endian length and the
    /// bytes. Strings work too (`&str: AsRef<[u8]>`).
    ///
    /// # Panics
    /// When the number of elements is not the product of `shape`, or an element is
    /// 4 GiB or longer.
    pub fn from_bytes<I>(name: impl Into<String>, shape: &[u64], elements: I) -> Self
    where
        I: IntoIterator,
        I::Item: AsRef<[u8]>,
    {
        let name = name.into();
        let mut data = Vec::new();
        let mut count = 0u64;
        for element in elements {
            let element = element.as_ref();
            let len = u32::try_from(element.len()).expect("BYTES element longer than u32::MAX");
            data.extend_from_slice(&len.to_le_bytes());
            data.extend_from_slice(element);
            count += 1;
        }
        assert_eq!(
            Some(count),
            checked_count(shape),
            "tensor '{name}': shape {} does not hold {count} elements",
            format_shape(shape)
        );
        Tensor {
            name,
            datatype: Datatype::Bytes,
            shape: shape.to_vec(),
            data,
        }
    }

    /// The number of elements: the product of the shape (1 for a scalar), saturating at
    /// `u64::MAX` for nonsensical shapes.
    pub fn element_count(&self) -> u64 {
        checked_count(&self.shape).unwrap_or(u64::MAX)
    }

    /// The leading dimension: N for a batch that predict receives.
    ///
    /// # Errors
    /// 400 when the tensor is a scalar.
    pub fn batch_size(&self) -> Result<usize, ItemError> {
        match self.shape.first() {
            Some(&n) => usize::try_from(n).map_err(|_| self.error("batch size does not fit")),
            None => Err(self.error("expected a batch dimension, got a scalar")),
        }
    }

    /// Checks the datatype.
    ///
    /// # Errors
    /// 400 `"x: expected datatype FP32, got INT64"`.
    pub fn expect_datatype(&self, datatype: Datatype) -> Result<(), ItemError> {
        if self.datatype == datatype {
            Ok(())
        } else {
            Err(self.error(format!("expected datatype {datatype}, got {}", self.datatype)))
        }
    }

    /// Checks the shape against `expected`, where `-1` matches any size.
    ///
    /// # Errors
    /// 400 `"x: expected shape [-1, 64], got [2, 63]"`.
    pub fn expect_shape(&self, expected: &[i64]) -> Result<(), ItemError> {
        self.expect_any_shape(&[expected]).map(|_| ())
    }

    /// Checks the shape against several alternatives (`-1` matches any size) and returns
    /// the index of the first that matches.
    ///
    /// # Errors
    /// 400 `"x: expected shape [64] or [8, 8], got [8, 7]"`.
    pub fn expect_any_shape(&self, alternatives: &[&[i64]]) -> Result<usize, ItemError> {
        if let Some(i) = alternatives.iter().position(|a| shape_matches(&self.shape, a)) {
            return Ok(i);
        }
        let expected: Vec<String> = alternatives.iter().map(|a| format_shape(a)).collect();
        Err(self.error(format!(
            "expected shape {}, got {}",
            expected.join(" or "),
            format_shape(&self.shape)
        )))
    }

    /// Checks that `data` is consistent with the datatype and shape.
    ///
    /// # Errors
    /// 400 when the data is too short or too long, or (for BYTES) not a sequence of
    /// length-prefixed elements, or (for BOOL) holds a byte other than 0 or 1.
    pub fn validate(&self) -> Result<(), ItemError> {
        match self.datatype {
            Datatype::Bytes => self.bytes_elements().map(|_| ()),
            Datatype::Bool => self.values::<bool>().map(|_| ()),
            _ => self.fixed_data().map(|_| ()),
        }
    }

    /// The elements as `T`, borrowed from `data` when its alignment permits, else copied.
    ///
    /// # Errors
    /// 400 when the datatype is not `T`'s, when the data length does not match the
    /// shape, or when a BOOL byte is neither 0 nor 1.
    pub fn values<T: Element>(&self) -> Result<Cow<'_, [T]>, ItemError> {
        self.expect_datatype(T::DATATYPE)?;
        let data = self.fixed_data()?;
        element::decode(data).ok_or_else(|| self.error("BOOL data holds a byte other than 0 or 1"))
    }

    /// The elements as a new `Vec<T>`; see [`Tensor::values`].
    ///
    /// # Errors
    /// As [`Tensor::values`].
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>, ItemError> {
        self.values().map(Cow::into_owned)
    }

    /// The data of a fixed-size datatype, checked against the shape.
    fn fixed_data(&self) -> Result<&[u8], ItemError> {
        let size = self.datatype.size().expect("fixed-size datatype") as u64;
        let expected = self.element_count().checked_mul(size);
        if expected != Some(self.data.len() as u64) {
            return Err(self.error(format!(
                "shape {} needs {} bytes of {} data, got {}",
                format_shape(&self.shape),
                expected.map_or_else(|| "too many".to_string(), |n| n.to_string()),
                self.datatype,
                self.data.len()
            )));
        }
        Ok(&self.data)
    }

    /// A 400 error whose message starts with this tensor's name.
    pub fn error(&self, message: impl AsRef<str>) -> ItemError {
        ItemError::bad_request(format!("{}: {}", self.name, message.as_ref()))
    }
}

macro_rules! typed_accessors {
    ($($from:ident, $to:ident, $ty:ty, $dt:literal;)*) => {
        impl Tensor {
            $(
                #[doc = concat!("A ", $dt, " tensor from `", stringify!($ty), "` values.")]
                ///
                /// # Panics
                /// When `values.len()` is not the product of `shape`.
                pub fn $from(name: impl Into<String>, shape: &[u64], values: &[$ty]) -> Self {
                    Self::from_values(name, shape, values)
                }

                #[doc = concat!("The elements of a ", $dt, " tensor as `Vec<", stringify!($ty), ">`.")]
                ///
                /// # Errors
                /// As [`Tensor::values`].
                pub fn $to(&self) -> Result<Vec<$ty>, ItemError> {
                    self.to_vec()
                }
            )*
        }
    };
}

typed_accessors! {
    from_bool, to_bool, bool, "BOOL";
    from_u8, to_u8, u8, "UINT8";
    from_u16, to_u16, u16, "UINT16";
    from_u32, to_u32, u32, "UINT32";
    from_u64, to_u64, u64, "UINT64";
    from_i8, to_i8, i8, "INT8";
    from_i16, to_i16, i16, "INT16";
    from_i32, to_i32, i32, "INT32";
    from_i64, to_i64, i64, "INT64";
    from_f16, to_f16, f16, "FP16";
    from_f32, to_f32, f32, "FP32";
    from_f64, to_f64, f64, "FP64";
}

fn checked_count(shape: &[u64]) -> Option<u64> {
    shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d))
}

fn shape_matches(shape: &[u64], pattern: &[i64]) -> bool {
    shape.len() == pattern.len()
        && shape
            .iter()
            .zip(pattern)
            .all(|(&d, &p)| p == -1 || u64::try_from(p) == Ok(d))
}

/// `[8, 7]`, the way shapes appear in error messages; works for `u64` and `i64` dims.
pub fn format_shape<D: std::fmt::Display>(shape: &[D]) -> String {
    let mut out = String::from("[");
    for (i, d) in shape.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "{d}");
    }
    out.push(']');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_round_trips() {
        let t = Tensor::from_f32("x", &[2, 2], &[1.0, 2.0, 3.0, 4.0]);
        assert_eq!((t.datatype, t.data.len()), (Datatype::Fp32, 16));
        assert_eq!(t.to_f32().unwrap(), [1.0, 2.0, 3.0, 4.0]);
        assert_eq!(Tensor::from_i64("l", &[2], &[-1, 9]).to_i64().unwrap(), [-1, 9]);
        assert_eq!(Tensor::from_u8("b", &[3], &[0, 7, 255]).data, [0, 7, 255]);
        assert_eq!(
            Tensor::from_bool("m", &[2], &[true, false]).to_bool().unwrap(),
            [true, false]
        );
        assert_eq!(Tensor::from_u16("u", &[], &[513]).data, [1, 2]);
        assert_eq!(Tensor::from_i8("i", &[1], &[-1]).to_i8().unwrap(), [-1]);
        assert_eq!(Tensor::from_i16("i", &[1], &[-2]).to_i16().unwrap(), [-2]);
        assert_eq!(Tensor::from_i32("i", &[1], &[-3]).to_i32().unwrap(), [-3]);
        assert_eq!(Tensor::from_u32("u", &[1], &[3]).to_u32().unwrap(), [3]);
        assert_eq!(Tensor::from_u64("u", &[1], &[u64::MAX]).to_u64().unwrap(), [u64::MAX]);
        assert_eq!(Tensor::from_f64("d", &[1], &[0.25]).to_f64().unwrap(), [0.25]);
        let h = [f16::from_f32(0.5), f16::from_f32(-3.0)];
        assert_eq!(Tensor::from_f16("h", &[2], &h).to_f16().unwrap(), h);
    }

    #[test]
    fn scalar_has_one_element() {
        let t = Tensor::from_i64("label", &[], &[7]);
        assert_eq!(t.element_count(), 1);
        assert_eq!(t.to_i64().unwrap(), [7]);
        assert!(t.batch_size().is_err());
    }

    #[test]
    #[should_panic(expected = "tensor 'x': shape [3] does not hold 2 values")]
    fn constructor_checks_count() {
        Tensor::from_f32("x", &[3], &[1.0, 2.0]);
    }

    #[test]
    fn wrong_datatype_and_length_are_400() {
        let t = Tensor::from_i64("x", &[2], &[1, 2]);
        let e = t.to_f32().unwrap_err();
        assert_eq!(
            (e.status, e.message.as_str()),
            (400, "x: expected datatype FP32, got INT64")
        );
        let short = Tensor::new("y", Datatype::Fp32, &[2, 2], vec![0; 12]);
        assert_eq!(
            short.to_f32().unwrap_err().message,
            "y: shape [2, 2] needs 16 bytes of FP32 data, got 12"
        );
        assert!(short.validate().is_err());
        let bad_bool = Tensor::new("b", Datatype::Bool, &[1], vec![2]);
        assert_eq!(
            bad_bool.validate().unwrap_err().message,
            "b: BOOL data holds a byte other than 0 or 1"
        );
    }

    #[test]
    fn shape_checks() {
        let t = Tensor::from_f32("input-0", &[8, 7], &[0.0; 56]);
        assert!(t.expect_shape(&[8, 7]).is_ok());
        assert!(t.expect_shape(&[-1, 7]).is_ok());
        assert_eq!(
            t.expect_any_shape(&[&[64], &[8, 8]]).unwrap_err().message,
            "input-0: expected shape [64] or [8, 8], got [8, 7]"
        );
        assert_eq!(t.expect_any_shape(&[&[64], &[-1, 7]]), Ok(1));
        assert_eq!(t.batch_size(), Ok(8));
        assert_eq!(t.expect_datatype(Datatype::Fp32), Ok(()));
    }

    #[test]
    fn huge_shapes_do_not_overflow() {
        let t = Tensor::new("x", Datatype::Fp64, &[u64::MAX, 2], vec![]);
        assert_eq!(t.element_count(), u64::MAX);
        assert!(t.validate().is_err());
    }
}
