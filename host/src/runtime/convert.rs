//! Moves tensors across the WIT boundary: host [`Tensor`]s to the generated binding types
//! and back. The conversion moves data buffers rather than copying them, so items can be
//! lent to a call and taken back after it (see `StageInstance::map_items`).

use super::bindings::types as wit;
use crate::model::outcome::ItemError;
use crate::model::tensor::{DataType, Tensor};

pub fn to_wit_datatype(datatype: DataType) -> wit::Datatype {
    match datatype {
        DataType::Bool => wit::Datatype::Bool,
        DataType::Uint8 => wit::Datatype::Uint8,
        DataType::Uint16 => wit::Datatype::Uint16,
        DataType::Uint32 => wit::Datatype::Uint32,
        DataType::Uint64 => wit::Datatype::Uint64,
        DataType::Int8 => wit::Datatype::Int8,
        DataType::Int16 => wit::Datatype::Int16,
        DataType::Int32 => wit::Datatype::Int32,
        DataType::Int64 => wit::Datatype::Int64,
        DataType::Fp16 => wit::Datatype::Fp16,
        DataType::Fp32 => wit::Datatype::Fp32,
        DataType::Fp64 => wit::Datatype::Fp64,
        DataType::Bytes => wit::Datatype::Bytes,
    }
}

pub fn from_wit_datatype(datatype: wit::Datatype) -> DataType {
    match datatype {
        wit::Datatype::Bool => DataType::Bool,
        wit::Datatype::Uint8 => DataType::Uint8,
        wit::Datatype::Uint16 => DataType::Uint16,
        wit::Datatype::Uint32 => DataType::Uint32,
        wit::Datatype::Uint64 => DataType::Uint64,
        wit::Datatype::Int8 => DataType::Int8,
        wit::Datatype::Int16 => DataType::Int16,
        wit::Datatype::Int32 => DataType::Int32,
        wit::Datatype::Int64 => DataType::Int64,
        wit::Datatype::Fp16 => DataType::Fp16,
        wit::Datatype::Fp32 => DataType::Fp32,
        wit::Datatype::Fp64 => DataType::Fp64,
        wit::Datatype::Bytes => DataType::Bytes,
    }
}

pub fn to_wit(tensor: Tensor) -> wit::Tensor {
    wit::Tensor {
        name: tensor.name,
        datatype: to_wit_datatype(tensor.datatype),
        shape: tensor.shape,
        data: tensor.data,
    }
}

pub fn from_wit(tensor: wit::Tensor) -> Tensor {
    Tensor {
        name: tensor.name,
        datatype: from_wit_datatype(tensor.datatype),
        shape: tensor.shape,
        data: tensor.data,
    }
}

pub fn from_wit_error(error: wit::ItemError) -> ItemError {
    ItemError::new(error.status, error.message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datatypes_round_trip() {
        for d in DataType::ALL {
            assert_eq!(from_wit_datatype(to_wit_datatype(d)), d);
        }
    }
}
