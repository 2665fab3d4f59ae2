//! Rust types for the fixed-size V2 datatypes, and their little-endian encoding.
//!
//! On little-endian targets (wasm32, x86_64, aarch64) the in-memory form of every
//! [`Element`] type *is* its wire form, so encoding is one copy and decoding can borrow
//! the tensor's bytes when they happen to be aligned.

use std::borrow::Cow;

use half::f16;

use crate::Datatype;

mod sealed {
    pub trait Sealed {}
}

/// A Rust type whose values are the elements of one fixed-size [`Datatype`].
///
/// | Rust | datatype | | Rust | datatype |
/// | --- | --- | --- | --- | --- |
/// | `bool` | BOOL | | `i8` | INT8 |
/// | `u8` | UINT8 | | `i16` | INT16 |
/// | `u16` | UINT16 | | `i32` | INT32 |
/// | `u32` | UINT32 | | `i64` | INT64 |
/// | `u64` | UINT64 | | [`f16`](struct@f16) | FP16 |
/// | `f32` | FP32 | | `f64` | FP64 |
///
/// The trait is sealed: the byte-level casts in this crate rely on exactly these types
/// (no padding, little-endian in memory on little-endian targets).
pub trait Element: sealed::Sealed + Copy + 'static {
    /// The datatype whose elements are values of this type.
    const DATATYPE: Datatype;

    /// Decodes one element from exactly `size_of::<Self>()` little-endian bytes; `None`
    /// when they are not a valid value (only BOOL has invalid values: anything but 0 or 1).
    fn from_le_bytes(bytes: &[u8]) -> Option<Self>;

    /// Whether every element in `bytes` is a valid value (see [`Element::from_le_bytes`]).
    fn all_valid(_bytes: &[u8]) -> bool {
        true
    }
}

macro_rules! numeric_element {
    ($($ty:ty => $dt:ident),* $(,)?) => {$(
        impl sealed::Sealed for $ty {}
        impl Element for $ty {
            const DATATYPE: Datatype = Datatype::$dt;

            fn from_le_bytes(bytes: &[u8]) -> Option<Self> {
                Some(<$ty>::from_le_bytes(bytes.try_into().ok()?))
            }
        }
    )*};
}

numeric_element! {
    u8 => Uint8, u16 => Uint16, u32 => Uint32, u64 => Uint64,
    i8 => Int8, i16 => Int16, i32 => Int32, i64 => Int64,
    f16 => Fp16, f32 => Fp32, f64 => Fp64,
}

impl sealed::Sealed for bool {}
impl Element for bool {
    const DATATYPE: Datatype = Datatype::Bool;

    fn from_le_bytes(bytes: &[u8]) -> Option<Self> {
        match bytes {
            [0] => Some(false),
            [1] => Some(true),
            _ => None,
        }
    }

    fn all_valid(bytes: &[u8]) -> bool {
        bytes.iter().all(|&b| b <= 1)
    }
}

/// The little-endian bytes of `values`.
pub(crate) fn encode<T: Element>(values: &[T]) -> Vec<u8> {
    // SAFETY: `Element` is sealed to primitive types without padding whose memory form
    // on a little-endian target (the crate refuses others) is their little-endian
    // encoding; bool is one byte, 0 or 1.
    let bytes = unsafe { std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), size_of_val(values)) };
    bytes.to_vec()
}

/// Decodes `bytes` (a whole number of elements) into values, borrowing them when the
/// alignment permits. `None` when some element is not a valid value.
pub(crate) fn decode<T: Element>(bytes: &[u8]) -> Option<Cow<'_, [T]>> {
    debug_assert_eq!(bytes.len() % size_of::<T>(), 0);
    if !T::all_valid(bytes) {
        return None;
    }
    // SAFETY: as in `encode`; every byte pattern is now a valid `T` (BOOL was checked).
    let (head, body, tail) = unsafe { bytes.align_to::<T>() };
    if head.is_empty() && tail.is_empty() {
        return Some(Cow::Borrowed(body));
    }
    bytes
        .chunks_exact(size_of::<T>())
        .map(T::from_le_bytes)
        .collect::<Option<Vec<T>>>()
        .map(Cow::Owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_little_endian() {
        assert_eq!(encode(&[1.0f32]), 1.0f32.to_le_bytes());
        assert_eq!(encode(&[-2i64, 3]).len(), 16);
        assert_eq!(encode(&[true, false]), [1, 0]);
        assert_eq!(encode(&[f16::from_f32(1.5)]), f16::from_f32(1.5).to_le_bytes());
    }

    #[test]
    fn decodes_aligned_and_unaligned() {
        let values = [1.5f32, -2.0, 3.25];
        let mut bytes = vec![0u8];
        bytes.extend_from_slice(&encode(&values));
        // Allocations are at least 4-aligned, so offset 1 takes the copying path.
        assert_eq!(&*decode::<f32>(&bytes[1..]).unwrap(), &values);
        let aligned = encode(&values);
        assert_eq!(&*decode::<f32>(&aligned).unwrap(), &values);
    }

    #[test]
    fn rejects_invalid_bools() {
        assert_eq!(decode::<bool>(&[0, 1]).unwrap().as_ref(), &[false, true]);
        assert!(decode::<bool>(&[0, 2]).is_none());
    }
}
