//! Serializing one output [`Tensor`] as a V2 `$response_output` JSON object.
//!
//! JSON data is always flat (as Triton sends it), whatever the shape. Floats are written
//! as the shortest decimal that reads back to the same value of their own width (an FP32
//! `0.1` is written `0.1`, not `0.10000000149011612`); FP16 likewise (FP16 `0.1` is written
//! `0.1`, and the FP16 maximum 65504 is written `65500.0`, which reads back to it). JSON has no NaN or
//! infinity: non-finite floats are written as `null`, so clients that need them must ask
//! for binary output. BYTES elements are written as strings, with invalid UTF-8 replaced
//! by U+FFFD; binary output is the only lossless form for non-UTF-8 BYTES.
//!
//! A binary output carries `parameters.binary_data_size` instead of `data`; the caller
//! appends its bytes after the JSON.

use half::f16;
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};

use crate::model::tensor::{bytes_elements, DataType, Tensor};

/// One output as it appears in a response's `outputs` array.
pub(crate) struct JsonOutput<'a> {
    pub tensor: &'a Tensor,
    /// Announce binary data instead of writing `data`.
    pub binary: bool,
    /// Prepend a leading dimension of 1 to the shape (per-item results of a 207).
    pub leading_one: bool,
}

impl Serialize for JsonOutput<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(4))?;
        map.serialize_entry("name", &self.tensor.name)?;
        map.serialize_entry("datatype", self.tensor.datatype.as_str())?;
        map.serialize_entry(
            "shape",
            &Shape {
                dims: &self.tensor.shape,
                leading_one: self.leading_one,
            },
        )?;
        if self.binary {
            map.serialize_entry("parameters", &BinaryParameters(self.tensor.data.len()))?;
        } else {
            map.serialize_entry("data", &FlatData(self.tensor))?;
        }
        map.end()
    }
}

struct Shape<'a> {
    dims: &'a [u64],
    leading_one: bool,
}

impl Serialize for Shape<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let lead: &[u64] = if self.leading_one { &[1] } else { &[] };
        serializer.collect_seq(lead.iter().chain(self.dims))
    }
}

struct BinaryParameters(usize);

impl Serialize for BinaryParameters {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(1))?;
        map.serialize_entry("binary_data_size", &self.0)?;
        map.end()
    }
}

/// A tensor's elements as a flat JSON array.
struct FlatData<'a>(&'a Tensor);

/// Writes each `N`-byte little-endian element of `data`, converted by `convert`.
fn elements<S, T, const N: usize>(serializer: S, data: &[u8], convert: impl Fn([u8; N]) -> T) -> Result<S::Ok, S::Error>
where
    S: Serializer,
    T: Serialize,
{
    let mut seq = serializer.serialize_seq(Some(data.len() / N))?;
    for chunk in data.chunks_exact(N) {
        let mut le = [0u8; N];
        le.copy_from_slice(chunk);
        seq.serialize_element(&convert(le))?;
    }
    seq.end()
}

impl Serialize for FlatData<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let data = &self.0.data;
        match self.0.datatype {
            DataType::Bool => elements(s, data, |[b]: [u8; 1]| b != 0),
            DataType::Uint8 => elements(s, data, u8::from_le_bytes),
            DataType::Uint16 => elements(s, data, u16::from_le_bytes),
            DataType::Uint32 => elements(s, data, u32::from_le_bytes),
            DataType::Uint64 => elements(s, data, u64::from_le_bytes),
            DataType::Int8 => elements(s, data, i8::from_le_bytes),
            DataType::Int16 => elements(s, data, i16::from_le_bytes),
            DataType::Int32 => elements(s, data, i32::from_le_bytes),
            DataType::Int64 => elements(s, data, i64::from_le_bytes),
            DataType::Fp16 => elements(s, data, |b| shortest_f16(f16::from_le_bytes(b))),
            DataType::Fp32 => elements(s, data, f32::from_le_bytes),
            DataType::Fp64 => elements(s, data, f64::from_le_bytes),
            DataType::Bytes => s.collect_seq(bytes_elements(data).map(String::from_utf8_lossy)),
        }
    }
}

/// The f64 with the fewest significant digits that converts back to exactly `v`, so
/// FP16 values print as `0.1` rather than `0.0999755859375`.
pub(crate) fn shortest_f16(v: f16) -> f64 {
    let exact = v.to_f64();
    if !exact.is_finite() || exact == 0.0 {
        return exact;
    }
    // Five significant digits always suffice for a half-precision value.
    for digits in 0..5 {
        let candidate: f64 = match format!("{exact:.digits$e}").parse() {
            Ok(c) => c,
            Err(_) => break,
        };
        if f16::from_f64(candidate) == v {
            return candidate;
        }
    }
    exact
}
