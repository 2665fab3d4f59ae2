//! A tensor's values between the typed fields of `InferTensorContents` and the tensor's
//! bytes. Typed → bytes is not here: the values are handed to the protocol's one validated
//! path as [`InputData`]; bytes → typed (for a client that sends typed contents) is.

use super::proto::InferTensorContents;
use crate::model::tensor::{bytes_elements, DataType};
use crate::protocol::InputData;

/// The typed field that holds `datatype`'s values (an unknown datatype is refused by the
/// protocol's checks, whatever the data).
pub(super) fn typed_data(datatype: &str, c: InferTensorContents) -> InputData {
    match datatype {
        "BOOL" => InputData::Bool(c.bool_contents),
        "INT8" | "INT16" | "INT32" => InputData::Int(c.int_contents),
        "INT64" => InputData::Int64(c.int64_contents),
        "UINT8" | "UINT16" | "UINT32" => InputData::Uint(c.uint_contents),
        "UINT64" => InputData::Uint64(c.uint64_contents),
        "FP32" => InputData::Fp32(c.fp32_contents),
        "FP64" => InputData::Fp64(c.fp64_contents),
        "BYTES" => InputData::Bytes(c.bytes_contents),
        _ => InputData::Raw(Vec::new()),
    }
}

/// Whether any typed field holds a value.
pub(super) fn has_values(c: &InferTensorContents) -> bool {
    !(c.bool_contents.is_empty()
        && c.int_contents.is_empty()
        && c.int64_contents.is_empty()
        && c.uint_contents.is_empty()
        && c.uint64_contents.is_empty()
        && c.fp32_contents.is_empty()
        && c.fp64_contents.is_empty()
        && c.bytes_contents.is_empty())
}

/// A validated tensor's data (`datatype`'s elements) in the typed field of its datatype;
/// `None` for FP16, which has none.
pub(super) fn typed_contents(datatype: DataType, data: &[u8]) -> Option<InferTensorContents> {
    use DataType as D;
    let mut c = InferTensorContents::default();
    match datatype {
        D::Bool => c.bool_contents = data.iter().map(|&b| b != 0).collect(),
        D::Int8 => c.int_contents = le(data, |b: [u8; 1]| i32::from(i8::from_le_bytes(b))),
        D::Int16 => c.int_contents = le(data, |b: [u8; 2]| i32::from(i16::from_le_bytes(b))),
        D::Int32 => c.int_contents = le(data, i32::from_le_bytes),
        D::Int64 => c.int64_contents = le(data, i64::from_le_bytes),
        D::Uint8 => c.uint_contents = data.iter().map(|&b| u32::from(b)).collect(),
        D::Uint16 => c.uint_contents = le(data, |b: [u8; 2]| u32::from(u16::from_le_bytes(b))),
        D::Uint32 => c.uint_contents = le(data, u32::from_le_bytes),
        D::Uint64 => c.uint64_contents = le(data, u64::from_le_bytes),
        D::Fp32 => c.fp32_contents = le(data, f32::from_le_bytes),
        D::Fp64 => c.fp64_contents = le(data, f64::from_le_bytes),
        D::Bytes => c.bytes_contents = bytes_elements(data).map(<[u8]>::to_vec).collect(),
        D::Fp16 => return None,
    }
    Some(c)
}

/// Little-endian elements of `N` bytes each, converted.
fn le<const N: usize, T>(data: &[u8], convert: impl Fn([u8; N]) -> T) -> Vec<T> {
    data.chunks_exact(N)
        .map(|chunk| {
            let mut element = [0; N];
            element.copy_from_slice(chunk);
            convert(element)
        })
        .collect()
}

/// A tensor's shape as protobuf dimensions.
pub(super) fn dims(shape: &[u64]) -> Vec<i64> {
    shape.iter().map(|&d| i64::try_from(d).unwrap_or(i64::MAX)).collect()
}
