//! Host-side tensors: the one representation every layer shares.
//!
//! A [`Tensor`] is dense, row-major and little-endian, exactly the layout the WIT contract
//! (`wit/plugin.wit`) gives plugins, so crossing into a plugin moves the bytes instead of
//! converting them. BYTES tensors hold each element as a 4-byte little-endian length
//! followed by its bytes (the V2 binary extension's layout).
//!
//! This module also owns the two reshapes batching needs: splitting a request's tensors
//! into items along the leading dimension, and stacking items back into a batch.

use std::fmt;

/// Element types of the Open Inference Protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DataType {
    Bool,
    Uint8,
    Uint16,
    Uint32,
    Uint64,
    Int8,
    Int16,
    Int32,
    Int64,
    Fp16,
    Fp32,
    Fp64,
    Bytes,
}

impl DataType {
    /// Every datatype, in the protocol's order.
    pub const ALL: [DataType; 13] = [
        DataType::Bool,
        DataType::Uint8,
        DataType::Uint16,
        DataType::Uint32,
        DataType::Uint64,
        DataType::Int8,
        DataType::Int16,
        DataType::Int32,
        DataType::Int64,
        DataType::Fp16,
        DataType::Fp32,
        DataType::Fp64,
        DataType::Bytes,
    ];

    /// The protocol's spelling, e.g. `"FP32"`.
    pub fn as_str(self) -> &'static str {
        match self {
            DataType::Bool => "BOOL",
            DataType::Uint8 => "UINT8",
            DataType::Uint16 => "UINT16",
            DataType::Uint32 => "UINT32",
            DataType::Uint64 => "UINT64",
            DataType::Int8 => "INT8",
            DataType::Int16 => "INT16",
            DataType::Int32 => "INT32",
            DataType::Int64 => "INT64",
            DataType::Fp16 => "FP16",
            DataType::Fp32 => "FP32",
            DataType::Fp64 => "FP64",
            DataType::Bytes => "BYTES",
        }
    }

    /// Parses the protocol's spelling (exact, upper case, as clients send it).
    pub fn parse(name: &str) -> Option<DataType> {
        DataType::ALL.into_iter().find(|d| d.as_str() == name)
    }

    /// Bytes per element, or `None` for variable-length BYTES.
    pub fn element_size(self) -> Option<usize> {
        match self {
            DataType::Bool | DataType::Uint8 | DataType::Int8 => Some(1),
            DataType::Uint16 | DataType::Int16 | DataType::Fp16 => Some(2),
            DataType::Uint32 | DataType::Int32 | DataType::Fp32 => Some(4),
            DataType::Uint64 | DataType::Int64 | DataType::Fp64 => Some(8),
            DataType::Bytes => None,
        }
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A declared input or output (`model.toml`'s `inputs` and `outputs`): name, datatype and
/// per-item shape(s).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorSpec {
    pub name: String,
    pub datatype: DataType,
    /// Accepted per-item shapes (without the batch dimension); -1 matches any size.
    pub shapes: Vec<Vec<i64>>,
}

impl TensorSpec {
    /// Whether a per-item shape is one of the accepted ones.
    pub fn accepts_shape(&self, shape: &[u64]) -> bool {
        self.shapes.iter().any(|accepted| {
            accepted.len() == shape.len() && accepted.iter().zip(shape).all(|(&a, &s)| a < 0 || a as u64 == s)
        })
    }

    /// The accepted shapes as a client reads them, e.g. `[64] or [8, 8]`.
    pub fn describe_shapes(&self) -> String {
        self.shapes
            .iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(" or ")
    }
}

/// A named dense tensor (see the module docs for the byte layout).
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    pub name: String,
    pub datatype: DataType,
    pub shape: Vec<u64>,
    pub data: Vec<u8>,
}

/// The tensors of one example, without a batch dimension.
pub type Item = Vec<Tensor>;

/// Why tensor bytes do not fit their declared shape, or items cannot be stacked.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum TensorError {
    #[error("{name}: shape {shape:?} has too many elements")]
    ShapeOverflow { name: String, shape: Vec<u64> },
    #[error("{name}: shape {shape:?} needs {expected} bytes of {datatype} data, got {actual}")]
    SizeMismatch {
        name: String,
        shape: Vec<u64>,
        datatype: DataType,
        expected: u64,
        actual: u64,
    },
    #[error("{name}: BYTES data is malformed: {reason}")]
    MalformedBytes { name: String, reason: String },
    #[error("{name}: shape {shape:?} has no leading dimension to split")]
    NoBatchDimension { name: String, shape: Vec<u64> },
    #[error("{name}: items differ in {what} and cannot be stacked")]
    Unstackable { name: String, what: &'static str },
}

/// Product of a shape's dimensions, or `None` on overflow.
pub fn element_count(shape: &[u64]) -> Option<u64> {
    shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d))
}

impl Tensor {
    /// Number of elements its shape declares (saturating; validated tensors never overflow).
    pub fn element_count(&self) -> u64 {
        element_count(&self.shape).unwrap_or(u64::MAX)
    }

    /// Checks that `data` holds exactly the elements `shape` declares.
    pub fn validate(&self) -> Result<(), TensorError> {
        let count = element_count(&self.shape).ok_or_else(|| TensorError::ShapeOverflow {
            name: self.name.clone(),
            shape: self.shape.clone(),
        })?;
        match self.datatype.element_size() {
            Some(size) => {
                let expected = count
                    .checked_mul(size as u64)
                    .ok_or_else(|| TensorError::ShapeOverflow {
                        name: self.name.clone(),
                        shape: self.shape.clone(),
                    })?;
                if expected != self.data.len() as u64 {
                    return Err(TensorError::SizeMismatch {
                        name: self.name.clone(),
                        shape: self.shape.clone(),
                        datatype: self.datatype,
                        expected,
                        actual: self.data.len() as u64,
                    });
                }
                Ok(())
            }
            None => {
                let found = bytes_element_offsets(&self.data)
                    .map_err(|reason| TensorError::MalformedBytes {
                        name: self.name.clone(),
                        reason,
                    })?
                    .len() as u64
                    - 1;
                if found != count {
                    return Err(TensorError::MalformedBytes {
                        name: self.name.clone(),
                        reason: format!("shape {:?} declares {count} elements, data has {found}", self.shape),
                    });
                }
                Ok(())
            }
        }
    }

    /// Splits a validated tensor along its leading dimension into `shape[0]` tensors of
    /// shape `shape[1..]`.
    pub fn split_leading(&self) -> Result<Vec<Tensor>, TensorError> {
        let Some((&rows, rest)) = self.shape.split_first() else {
            return Err(TensorError::NoBatchDimension {
                name: self.name.clone(),
                shape: self.shape.clone(),
            });
        };
        let rows = rows as usize;
        let per_row = element_count(rest).unwrap_or(0) as usize;
        let piece = |data: Vec<u8>| Tensor {
            name: self.name.clone(),
            datatype: self.datatype,
            shape: rest.to_vec(),
            data,
        };
        match self.datatype.element_size() {
            Some(size) => {
                let row_bytes = per_row * size;
                if row_bytes == 0 {
                    return Ok((0..rows).map(|_| piece(Vec::new())).collect());
                }
                Ok(self.data.chunks_exact(row_bytes).map(|c| piece(c.to_vec())).collect())
            }
            None => {
                let offsets = bytes_element_offsets(&self.data).map_err(|reason| TensorError::MalformedBytes {
                    name: self.name.clone(),
                    reason,
                })?;
                Ok((0..rows)
                    .map(|r| {
                        let start = offsets[r * per_row];
                        let end = offsets[(r + 1) * per_row];
                        piece(self.data[start..end].to_vec())
                    })
                    .collect())
            }
        }
    }

    /// Stacks same-named, same-typed, same-shaped tensors along a new leading dimension.
    pub fn stack<'a>(parts: impl ExactSizeIterator<Item = &'a Tensor>) -> Result<Tensor, TensorError> {
        let rows = parts.len() as u64;
        let mut out: Option<Tensor> = None;
        for part in parts {
            match &mut out {
                None => {
                    let mut shape = Vec::with_capacity(part.shape.len() + 1);
                    shape.push(rows);
                    shape.extend_from_slice(&part.shape);
                    let mut data = Vec::with_capacity(part.data.len() * rows as usize);
                    data.extend_from_slice(&part.data);
                    out = Some(Tensor {
                        name: part.name.clone(),
                        datatype: part.datatype,
                        shape,
                        data,
                    });
                }
                Some(acc) => {
                    let what = if acc.name != part.name {
                        Some("name")
                    } else if acc.datatype != part.datatype {
                        Some("datatype")
                    } else if acc.shape[1..] != part.shape[..] {
                        Some("shape")
                    } else {
                        None
                    };
                    if let Some(what) = what {
                        return Err(TensorError::Unstackable {
                            name: acc.name.clone(),
                            what,
                        });
                    }
                    acc.data.extend_from_slice(&part.data);
                }
            }
        }
        out.ok_or(TensorError::Unstackable {
            name: String::new(),
            what: "count (no items)",
        })
    }
}

impl Tensor {
    /// Stacks same-named, same-typed tensors of one rank along a new leading dimension,
    /// each padded with `pad` (one element's bytes) to the largest size along every axis.
    /// Also returns how many elements are padding.
    pub fn stack_padded(parts: &[&Tensor], pad: &[u8]) -> Result<(Tensor, u64), TensorError> {
        let Some(first) = parts.first() else {
            return Err(TensorError::Unstackable {
                name: String::new(),
                what: "count (no items)",
            });
        };
        let unstackable = |what| TensorError::Unstackable {
            name: first.name.clone(),
            what,
        };
        let Some(size) = first.datatype.element_size() else {
            return Err(unstackable("datatype (BYTES cannot be padded)"));
        };
        if pad.len() != size {
            return Err(unstackable("pad value size"));
        }
        let mut largest = first.shape.clone();
        for part in parts {
            if part.name != first.name {
                return Err(unstackable("name"));
            }
            if part.datatype != first.datatype {
                return Err(unstackable("datatype"));
            }
            if part.shape.len() != largest.len() {
                return Err(unstackable("rank"));
            }
            for (l, &d) in largest.iter_mut().zip(&part.shape) {
                *l = (*l).max(d);
            }
        }
        let per_row = element_count(&largest).ok_or_else(|| TensorError::ShapeOverflow {
            name: first.name.clone(),
            shape: largest.clone(),
        })? as usize;
        let mut data = pad.repeat(per_row * parts.len());
        let mut real = 0u64;
        for (row, part) in parts.iter().enumerate() {
            real += part.element_count();
            copy_into_padded(
                &part.data,
                &part.shape,
                &largest,
                size,
                &mut data[row * per_row * size..],
            );
        }
        let mut shape = Vec::with_capacity(largest.len() + 1);
        shape.push(parts.len() as u64);
        shape.extend_from_slice(&largest);
        let padding = (per_row * parts.len()) as u64 - real;
        Ok((
            Tensor {
                name: first.name.clone(),
                datatype: first.datatype,
                shape,
                data,
            },
            padding,
        ))
    }
}

/// Copies a row-major block of `shape` into the start of a row-major block of `padded`
/// (at least as large along every axis), element by element runs of the last axis.
fn copy_into_padded(data: &[u8], shape: &[u64], padded: &[u64], size: usize, out: &mut [u8]) {
    let Some((&last, outer)) = shape.split_last() else {
        out[..data.len()].copy_from_slice(data);
        return;
    };
    let run = last as usize * size;
    if run == 0 || data.is_empty() {
        return;
    }
    // Strides of the padded block, in bytes, for every axis but the last.
    let mut strides = vec![0usize; outer.len()];
    let mut stride = *padded.last().unwrap_or(&0) as usize * size;
    for axis in (0..outer.len()).rev() {
        strides[axis] = stride;
        stride *= padded[axis] as usize;
    }
    let mut index = vec![0u64; outer.len()];
    for chunk in data.chunks_exact(run) {
        let at: usize = index.iter().zip(&strides).map(|(&i, &s)| i as usize * s).sum();
        out[at..at + run].copy_from_slice(chunk);
        // The next outer index, last axis fastest.
        for axis in (0..outer.len()).rev() {
            index[axis] += 1;
            if index[axis] < outer[axis] {
                break;
            }
            index[axis] = 0;
        }
    }
}

/// Byte offsets of the elements of BYTES data: `offsets[i]..offsets[i + 1]` spans element
/// `i` including its 4-byte length prefix; the last offset is `data.len()`.
pub fn bytes_element_offsets(data: &[u8]) -> Result<Vec<usize>, String> {
    let mut offsets = vec![0];
    let mut at = 0usize;
    while at < data.len() {
        let Some(prefix) = data.get(at..at + 4) else {
            return Err(format!("truncated length prefix at byte {at}"));
        };
        let len = u32::from_le_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]) as usize;
        let end = at + 4 + len;
        if end > data.len() {
            return Err(format!(
                "element at byte {at} declares {len} bytes, only {} remain",
                data.len() - at - 4
            ));
        }
        at = end;
        offsets.push(at);
    }
    Ok(offsets)
}

/// Iterates the payloads of BYTES data (without length prefixes); call on validated data.
pub fn bytes_elements(data: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut at = 0usize;
    std::iter::from_fn(move || {
        let prefix = data.get(at..at + 4)?;
        let len = u32::from_le_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]) as usize;
        let payload = data.get(at + 4..at + 4 + len)?;
        at += 4 + len;
        Some(payload)
    })
}

/// Appends one BYTES element (length prefix and payload) to `data`.
pub fn push_bytes_element(data: &mut Vec<u8>, payload: &[u8]) {
    data.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    data.extend_from_slice(payload);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp32(name: &str, shape: &[u64], values: &[f32]) -> Tensor {
        Tensor {
            name: name.into(),
            datatype: DataType::Fp32,
            shape: shape.to_vec(),
            data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        }
    }

    #[test]
    fn datatype_names_round_trip() {
        for d in DataType::ALL {
            assert_eq!(DataType::parse(d.as_str()), Some(d));
        }
        assert_eq!(DataType::parse("fp32"), None);
    }

    #[test]
    fn validate_catches_size_mismatch() {
        let mut t = fp32("x", &[2, 2], &[1.0, 2.0, 3.0, 4.0]);
        assert!(t.validate().is_ok());
        t.shape = vec![2, 3];
        assert!(matches!(
            t.validate(),
            Err(TensorError::SizeMismatch {
                expected: 24,
                actual: 16,
                ..
            })
        ));
        t.shape = vec![u64::MAX, 3];
        assert!(matches!(t.validate(), Err(TensorError::ShapeOverflow { .. })));
    }

    #[test]
    fn split_then_stack_is_identity() {
        let t = fp32("x", &[3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let rows = t.split_leading().unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[1], fp32("x", &[2], &[3.0, 4.0]));
        assert_eq!(Tensor::stack(rows.iter()).unwrap(), t);
    }

    #[test]
    fn bytes_split_and_validate() {
        let mut data = Vec::new();
        for s in ["a", "bc", "", "def"] {
            push_bytes_element(&mut data, s.as_bytes());
        }
        let t = Tensor {
            name: "s".into(),
            datatype: DataType::Bytes,
            shape: vec![2, 2],
            data,
        };
        t.validate().unwrap();
        let rows = t.split_leading().unwrap();
        let second: Vec<&[u8]> = bytes_elements(&rows[1].data).collect();
        assert_eq!(second, vec![b"".as_slice(), b"def".as_slice()]);
        assert_eq!(Tensor::stack(rows.iter()).unwrap(), t);
        let bad = Tensor {
            shape: vec![5],
            ..t.clone()
        };
        assert!(bad.validate().is_err());
        let truncated = Tensor {
            data: t.data[..t.data.len() - 1].to_vec(),
            ..t
        };
        assert!(truncated.validate().is_err());
    }

    #[test]
    fn stack_padded_pads_every_axis_and_counts_the_padding() {
        let a = fp32("x", &[2, 1], &[1.0, 2.0]);
        let b = fp32("x", &[1, 3], &[3.0, 4.0, 5.0]);
        let (t, padding) = Tensor::stack_padded(&[&a, &b], &(-1f32).to_le_bytes()).unwrap();
        assert_eq!(t.shape, vec![2, 2, 3]);
        assert_eq!(padding, 12 - 5);
        assert_eq!(
            t,
            fp32(
                "x",
                &[2, 2, 3],
                &[1.0, -1.0, -1.0, 2.0, -1.0, -1.0, 3.0, 4.0, 5.0, -1.0, -1.0, -1.0]
            )
        );
        // Equal shapes: exactly what stack gives.
        let (same, none) = Tensor::stack_padded(&[&a, &a], &[0; 4]).unwrap();
        assert_eq!((same, none), (Tensor::stack([&a, &a].into_iter()).unwrap(), 0));
        // An empty item is all padding; a scalar is copied as it is.
        let empty = fp32("x", &[0, 3], &[]);
        let (t, padding) = Tensor::stack_padded(&[&empty, &b], &[0; 4]).unwrap();
        assert_eq!((t.shape.clone(), padding), (vec![2, 1, 3], 3));
        let s = fp32("x", &[], &[7.0]);
        assert_eq!(Tensor::stack_padded(&[&s, &s], &[0; 4]).unwrap().0.data.len(), 8);
        let refused = |parts: &[&Tensor], pad: &[u8]| Tensor::stack_padded(parts, pad).unwrap_err();
        assert!(matches!(
            refused(&[&a, &s], &[0; 4]),
            TensorError::Unstackable { what: "rank", .. }
        ));
        assert!(matches!(
            refused(&[&a], &[0; 2]),
            TensorError::Unstackable {
                what: "pad value size",
                ..
            }
        ));
        let text = Tensor {
            name: "s".into(),
            datatype: DataType::Bytes,
            shape: vec![0],
            data: vec![],
        };
        assert!(matches!(refused(&[&text], &[]), TensorError::Unstackable { .. }));
    }

    #[test]
    fn stack_refuses_mixed_shapes() {
        let a = fp32("x", &[2], &[1.0, 2.0]);
        let b = fp32("x", &[1], &[1.0]);
        assert!(matches!(
            Tensor::stack([a, b].iter()),
            Err(TensorError::Unstackable { what: "shape", .. })
        ));
    }
}
