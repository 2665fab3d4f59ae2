//! Decoding the JSON `data` of one input straight into tensor bytes.
//!
//! [`DataSeed`] is a serde `DeserializeSeed` that walks `data` — flat, nested to any depth
//! (row-major), or a bare scalar — and appends each element to a little-endian buffer as
//! the datatype dictates, without building an intermediate JSON tree. It never allocates
//! from a declared shape: the buffer only grows with elements actually present.
//!
//! A bad element does not abort the JSON parse: the first fault is recorded, the rest of
//! `data` is skipped, and the caller turns the fault into a [`ProtocolError`] once it
//! knows the input's name (which may come after `data` in the object).

use std::fmt;

use half::f16;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::error::{render_f64, render_str, ProtocolError};
use crate::model::tensor::{push_bytes_element, DataType};

/// The first thing wrong with an input's `data`.
#[derive(Debug)]
enum DataFault {
    Type { index: u64, found: String },
    Range { value: String },
    TooLong { index: u64, len: u64 },
}

/// Elements decoded so far for one input.
#[derive(Debug)]
pub(crate) struct DataState {
    datatype: DataType,
    bytes: Vec<u8>,
    count: u64,
    fault: Option<DataFault>,
    /// Read `null` as NaN in float data: answers write non-finite floats as `null`
    /// (see [`super::tensor_json`]); requests never may.
    null_is_nan: bool,
}

impl DataState {
    /// Starts an empty buffer, reserving room for `expect_elements` fixed-size elements
    /// (callers bound this by the JSON text's length, never by the declared shape alone).
    pub(crate) fn new(datatype: DataType, expect_elements: usize) -> DataState {
        let capacity = datatype
            .element_size()
            .map_or(0, |size| expect_elements.saturating_mul(size));
        DataState {
            datatype,
            bytes: Vec::with_capacity(capacity),
            count: 0,
            fault: None,
            null_is_nan: false,
        }
    }

    /// An empty buffer for the `data` of an answer's output, where `null` stands for a
    /// non-finite float (NaN: which one was lost when the answer was written).
    pub(crate) fn for_answer(datatype: DataType) -> DataState {
        DataState {
            null_is_nan: true,
            ..DataState::new(datatype, 0)
        }
    }

    /// The decoded bytes and element count, or the first fault as a client error.
    pub(crate) fn finish(self, name: &str) -> Result<(Vec<u8>, u64), ProtocolError> {
        let name = name.to_owned();
        match self.fault {
            None => Ok((self.bytes, self.count)),
            Some(DataFault::Type { index, found }) => Err(ProtocolError::ElementType {
                name,
                index,
                found,
                expected: expected(self.datatype),
            }),
            Some(DataFault::Range { value }) => Err(ProtocolError::OutOfRange {
                name,
                value,
                datatype: self.datatype,
            }),
            Some(DataFault::TooLong { index, len }) => Err(ProtocolError::BytesElementTooLong { name, index, len }),
        }
    }

    fn wrong_type(&mut self, found: String) {
        self.fault = Some(DataFault::Type {
            index: self.count,
            found,
        });
    }

    fn put<const N: usize>(&mut self, le_bytes: Option<[u8; N]>, value: impl FnOnce() -> String) {
        match le_bytes {
            Some(b) => {
                self.bytes.extend_from_slice(&b);
                self.count += 1;
            }
            None => self.fault = Some(DataFault::Range { value: value() }),
        }
    }

    /// An integer-valued JSON number (`render` prints it as the client wrote it).
    fn int(&mut self, v: i128, render: impl FnOnce() -> String) {
        match self.datatype {
            DataType::Uint8 => self.put(u8::try_from(v).ok().map(u8::to_le_bytes), render),
            DataType::Uint16 => self.put(u16::try_from(v).ok().map(u16::to_le_bytes), render),
            DataType::Uint32 => self.put(u32::try_from(v).ok().map(u32::to_le_bytes), render),
            DataType::Uint64 => self.put(u64::try_from(v).ok().map(u64::to_le_bytes), render),
            DataType::Int8 => self.put(i8::try_from(v).ok().map(i8::to_le_bytes), render),
            DataType::Int16 => self.put(i16::try_from(v).ok().map(i16::to_le_bytes), render),
            DataType::Int32 => self.put(i32::try_from(v).ok().map(i32::to_le_bytes), render),
            DataType::Int64 => self.put(i64::try_from(v).ok().map(i64::to_le_bytes), render),
            DataType::Fp16 | DataType::Fp32 | DataType::Fp64 => self.float(v as f64, render),
            DataType::Bool | DataType::Bytes => self.wrong_type(render()),
        }
    }

    /// A JSON number with a fraction or exponent (or too large for 64-bit integers).
    fn f64(&mut self, v: f64) {
        match self.datatype {
            DataType::Fp16 | DataType::Fp32 | DataType::Fp64 => self.float(v, || render_f64(v)),
            DataType::Bool | DataType::Bytes => self.wrong_type(render_f64(v)),
            _ if v.fract() != 0.0 => self.wrong_type(render_f64(v)),
            // Integral: in range of i128 it is range-checked exactly, beyond it never fits.
            _ if v.abs() < 1.7e38 => self.int(v as i128, || render_f64(v)),
            _ => self.fault = Some(DataFault::Range { value: render_f64(v) }),
        }
    }

    fn float(&mut self, v: f64, render: impl FnOnce() -> String) {
        match self.datatype {
            DataType::Fp16 => {
                let h = f16::from_f64(v);
                self.put(h.is_finite().then(|| h.to_le_bytes()), render)
            }
            DataType::Fp32 => {
                let f = v as f32;
                self.put(f.is_finite().then(|| f.to_le_bytes()), render)
            }
            _ => self.put(Some(v.to_le_bytes()), render),
        }
    }

    fn bool(&mut self, v: bool) {
        match self.datatype {
            DataType::Bool => self.put(Some([u8::from(v)]), String::new),
            _ => self.wrong_type(v.to_string()),
        }
    }

    fn str(&mut self, v: &str) {
        if self.datatype != DataType::Bytes {
            return self.wrong_type(render_str(v));
        }
        if u32::try_from(v.len()).is_err() {
            self.fault = Some(DataFault::TooLong {
                index: self.count,
                len: v.len() as u64,
            });
            return;
        }
        push_bytes_element(&mut self.bytes, v.as_bytes());
        self.count += 1;
    }
}

/// What an element of `datatype` must look like in JSON, for messages.
fn expected(datatype: DataType) -> &'static str {
    match datatype {
        DataType::Bool => "true or false",
        DataType::Fp16 | DataType::Fp32 | DataType::Fp64 => "a number",
        DataType::Bytes => "a string",
        _ => "an integer",
    }
}

/// Deserializes one `data` value (array, nested arrays, or scalar) into a [`DataState`].
pub(crate) struct DataSeed<'a>(pub(crate) &'a mut DataState);

impl<'de> DeserializeSeed<'de> for DataSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        if self.0.fault.is_some() {
            deserializer.deserialize_ignored_any(IgnoredAny)?;
            return Ok(());
        }
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for DataSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("tensor data")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(DataSeed(&mut *self.0))?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        self.0.wrong_type(String::from("an object"));
        Ok(())
    }

    fn visit_bool<E>(self, v: bool) -> Result<(), E> {
        self.0.bool(v);
        Ok(())
    }

    fn visit_i64<E>(self, v: i64) -> Result<(), E> {
        self.0.int(i128::from(v), || v.to_string());
        Ok(())
    }

    fn visit_u64<E>(self, v: u64) -> Result<(), E> {
        self.0.int(i128::from(v), || v.to_string());
        Ok(())
    }

    fn visit_f64<E>(self, v: f64) -> Result<(), E> {
        self.0.f64(v);
        Ok(())
    }

    fn visit_str<E>(self, v: &str) -> Result<(), E> {
        self.0.str(v);
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        let float = matches!(self.0.datatype, DataType::Fp16 | DataType::Fp32 | DataType::Fp64);
        if self.0.null_is_nan && float {
            let nan = match self.0.datatype {
                DataType::Fp16 => f16::NAN.to_le_bytes().to_vec(),
                DataType::Fp32 => f32::NAN.to_le_bytes().to_vec(),
                _ => f64::NAN.to_le_bytes().to_vec(),
            };
            self.0.bytes.extend_from_slice(&nan);
            self.0.count += 1;
        } else {
            self.0.wrong_type(String::from("null"));
        }
        Ok(())
    }
}
