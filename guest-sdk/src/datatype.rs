//! V2 names and element sizes of [`Datatype`].

use core::fmt;

use crate::Datatype;

impl Datatype {
    /// Every datatype, in WIT declaration order.
    pub const ALL: [Datatype; 13] = [
        Datatype::Bool,
        Datatype::Uint8,
        Datatype::Uint16,
        Datatype::Uint32,
        Datatype::Uint64,
        Datatype::Int8,
        Datatype::Int16,
        Datatype::Int32,
        Datatype::Int64,
        Datatype::Fp16,
        Datatype::Fp32,
        Datatype::Fp64,
        Datatype::Bytes,
    ];

    /// The Open Inference Protocol name, e.g. `"FP32"` or `"BYTES"`.
    pub fn name(self) -> &'static str {
        match self {
            Datatype::Bool => "BOOL",
            Datatype::Uint8 => "UINT8",
            Datatype::Uint16 => "UINT16",
            Datatype::Uint32 => "UINT32",
            Datatype::Uint64 => "UINT64",
            Datatype::Int8 => "INT8",
            Datatype::Int16 => "INT16",
            Datatype::Int32 => "INT32",
            Datatype::Int64 => "INT64",
            Datatype::Fp16 => "FP16",
            Datatype::Fp32 => "FP32",
            Datatype::Fp64 => "FP64",
            Datatype::Bytes => "BYTES",
        }
    }

    /// The datatype with this Open Inference Protocol name (exact, upper case).
    pub fn from_name(name: &str) -> Option<Datatype> {
        Datatype::ALL.into_iter().find(|d| d.name() == name)
    }

    /// Bytes per element, or `None` for `BYTES`, whose elements vary in length.
    pub fn size(self) -> Option<usize> {
        match self {
            Datatype::Bool | Datatype::Uint8 | Datatype::Int8 => Some(1),
            Datatype::Uint16 | Datatype::Int16 | Datatype::Fp16 => Some(2),
            Datatype::Uint32 | Datatype::Int32 | Datatype::Fp32 => Some(4),
            Datatype::Uint64 | Datatype::Int64 | Datatype::Fp64 => Some(8),
            Datatype::Bytes => None,
        }
    }
}

/// Writes the V2 name, e.g. `FP32`.
impl fmt::Display for Datatype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for d in Datatype::ALL {
            assert_eq!(Datatype::from_name(d.name()), Some(d));
        }
        assert_eq!(Datatype::from_name("fp32"), None);
        assert_eq!(Datatype::Fp16.to_string(), "FP16");
    }

    #[test]
    fn sizes() {
        assert_eq!(Datatype::Bool.size(), Some(1));
        assert_eq!(Datatype::Fp16.size(), Some(2));
        assert_eq!(Datatype::Int64.size(), Some(8));
        assert_eq!(Datatype::Bytes.size(), None);
    }
}
