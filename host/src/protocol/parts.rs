//! [`InferRequest`]s built from parts that another wire format (gRPC) has already
//! separated, under the same caps of [`super::limits`] and the same validation
//! ([`Tensor::validate`]) as [`super::decode_request`]: every edge hands the server the
//! same kind of request, and none is checked less. Typed values become tensor bytes here
//! only ([`tensor_from_data`]), whether a request's or an answer's.

use std::collections::HashSet;

use super::error::ProtocolError;
use super::limits::{
    MAX_DIMS, MAX_ID_BYTES, MAX_INPUTS, MAX_NAME_BYTES, MAX_OUTPUTS, MAX_PARAMETERS, MAX_PARAMETER_STRING_BYTES,
};
use super::parameters::{ParameterValue, Parameters};
use super::request::{reject_unsupported, InferRequest, RequestedOutput};
use crate::model::tensor::{element_count, push_bytes_element, DataType, Tensor};

/// A request, field by field.
#[derive(Clone, Debug, Default)]
pub struct RequestParts {
    /// The request id (`None` or empty: none).
    pub id: Option<String>,
    pub parameters: Vec<(String, ParameterValue)>,
    pub inputs: Vec<InputParts>,
    pub outputs: Vec<OutputParts>,
}

/// One input: its header and its data, typed or as raw little-endian bytes.
#[derive(Clone, Debug)]
pub struct InputParts {
    pub name: String,
    pub datatype: String,
    pub shape: Vec<i64>,
    pub parameters: Vec<(String, ParameterValue)>,
    pub data: InputData,
}

/// One requested output.
#[derive(Clone, Debug)]
pub struct OutputParts {
    pub name: String,
    pub parameters: Vec<(String, ParameterValue)>,
}

/// An input's values.
#[derive(Clone, Debug)]
pub enum InputData {
    /// The tensor's bytes as the server stores them: little-endian elements, BYTES
    /// elements each prefixed by their length as a little-endian u32.
    Raw(Vec<u8>),
    Bool(Vec<bool>),
    /// INT8, INT16 and INT32 values (each checked against the datatype's range).
    Int(Vec<i32>),
    Int64(Vec<i64>),
    /// UINT8, UINT16 and UINT32 values (each checked against the datatype's range).
    Uint(Vec<u32>),
    Uint64(Vec<u64>),
    Fp32(Vec<f32>),
    Fp64(Vec<f64>),
    Bytes(Vec<Vec<u8>>),
}

impl InferRequest {
    /// Checks `parts` as [`super::decode_request`] checks a body, and builds the request.
    pub fn from_parts(parts: RequestParts) -> Result<InferRequest, ProtocolError> {
        let id = parts.id.filter(|id| !id.is_empty());
        if let Some(id) = &id {
            check_len(id, MAX_ID_BYTES, "request", "\"id\"")?;
        }
        let parameters = checked_parameters(parts.parameters, "request")?;
        if parts.inputs.is_empty() {
            return Err(ProtocolError::MissingField {
                at: String::from("request"),
                field: "\"inputs\"",
            });
        }
        check_count(parts.inputs.len(), MAX_INPUTS, "request", "inputs")?;
        check_count(parts.outputs.len(), MAX_OUTPUTS, "request", "requested outputs")?;

        let mut names = HashSet::with_capacity(parts.inputs.len());
        let mut inputs = Vec::with_capacity(parts.inputs.len());
        for (index, input) in parts.inputs.into_iter().enumerate() {
            let tensor = input_tensor(index, input)?;
            if !names.insert(tensor.name.clone()) {
                return Err(ProtocolError::DuplicateInput(tensor.name));
            }
            inputs.push(tensor);
        }

        let mut names = HashSet::with_capacity(parts.outputs.len());
        let mut outputs = Vec::with_capacity(parts.outputs.len());
        for (index, output) in parts.outputs.into_iter().enumerate() {
            check_len(&output.name, MAX_NAME_BYTES, &format!("outputs[{index}]"), "\"name\"")?;
            let at = format!("output '{}'", output.name);
            let parameters = checked_parameters(output.parameters, &at)?;
            reject_unsupported(&parameters, &at)?;
            if !names.insert(output.name.clone()) {
                return Err(ProtocolError::DuplicateOutput(output.name));
            }
            outputs.push(RequestedOutput {
                name: output.name,
                binary_data: None,
            });
        }
        Ok(InferRequest {
            id,
            inputs,
            outputs,
            parameters,
        })
    }
}

fn input_tensor(index: usize, input: InputParts) -> Result<Tensor, ProtocolError> {
    check_len(&input.name, MAX_NAME_BYTES, &format!("inputs[{index}]"), "\"name\"")?;
    let name = input.name;
    let at = format!("input '{name}'");
    check_len(&input.datatype, MAX_NAME_BYTES, &at, "\"datatype\"")?;
    let datatype = DataType::parse(&input.datatype).ok_or_else(|| ProtocolError::UnknownDatatype {
        name: name.clone(),
        found: super::error::render_str(&input.datatype),
    })?;
    check_count(input.shape.len(), MAX_DIMS, &at, "shape dimensions")?;
    if let Some(&dim) = input.shape.iter().find(|d| **d < 0) {
        return Err(ProtocolError::NegativeDimension {
            name,
            shape: format!("{:?}", input.shape),
            dim,
        });
    }
    let shape: Vec<u64> = input.shape.iter().map(|&d| d.unsigned_abs()).collect();
    let parameters = checked_parameters(input.parameters, &at)?;
    reject_unsupported(&parameters, &at)?;
    tensor_from_data(name, datatype, shape, input.data)
}

/// A tensor of `data`, checked against the datatype and the shape (the element count,
/// each value's range, [`Tensor::validate`]): the one path from typed values to tensor
/// bytes, for requests and for answers alike.
pub(super) fn tensor_from_data(
    name: String,
    datatype: DataType,
    shape: Vec<u64>,
    data: InputData,
) -> Result<Tensor, ProtocolError> {
    let expected = element_count(&shape).ok_or_else(|| ProtocolError::ShapeOverflow {
        name: name.clone(),
        shape: shape.clone(),
    })?;
    let data = typed_bytes(&name, datatype, &shape, expected, data)?;
    let tensor = Tensor {
        name,
        datatype,
        shape,
        data,
    };
    tensor.validate()?;
    Ok(tensor)
}

/// The tensor bytes of `data`, checked against the datatype and the element count.
fn typed_bytes(
    name: &str,
    datatype: DataType,
    shape: &[u64],
    expected: u64,
    data: InputData,
) -> Result<Vec<u8>, ProtocolError> {
    let mismatch = |actual: usize| ProtocolError::ElementCount {
        name: name.to_owned(),
        shape: shape.to_vec(),
        datatype,
        expected,
        actual: actual as u64,
    };
    let out_of_range = |value: String| ProtocolError::OutOfRange {
        name: name.to_owned(),
        value,
        datatype,
    };
    macro_rules! count {
        ($values:expr) => {
            if $values.len() as u64 != expected {
                return Err(mismatch($values.len()));
            }
        };
    }
    use DataType as D;
    Ok(match (datatype, data) {
        // Its length is checked by Tensor::validate, with the message REST gives.
        (_, InputData::Raw(bytes)) => bytes,
        (D::Bool, InputData::Bool(values)) => {
            count!(values);
            values.into_iter().map(u8::from).collect()
        }
        (D::Int8 | D::Int16 | D::Int32, InputData::Int(values)) => {
            count!(values);
            let mut bytes = Vec::with_capacity(values.len() * 4);
            for v in values {
                match datatype {
                    D::Int8 => bytes.extend(i8::try_from(v).map_err(|_| out_of_range(v.to_string()))?.to_le_bytes()),
                    D::Int16 => bytes.extend(i16::try_from(v).map_err(|_| out_of_range(v.to_string()))?.to_le_bytes()),
                    _ => bytes.extend(v.to_le_bytes()),
                }
            }
            bytes
        }
        (D::Int64, InputData::Int64(values)) => {
            count!(values);
            values.into_iter().flat_map(i64::to_le_bytes).collect()
        }
        (D::Uint8 | D::Uint16 | D::Uint32, InputData::Uint(values)) => {
            count!(values);
            let mut bytes = Vec::with_capacity(values.len() * 4);
            for v in values {
                match datatype {
                    D::Uint8 => bytes.extend(u8::try_from(v).map_err(|_| out_of_range(v.to_string()))?.to_le_bytes()),
                    D::Uint16 => bytes.extend(u16::try_from(v).map_err(|_| out_of_range(v.to_string()))?.to_le_bytes()),
                    _ => bytes.extend(v.to_le_bytes()),
                }
            }
            bytes
        }
        (D::Uint64, InputData::Uint64(values)) => {
            count!(values);
            values.into_iter().flat_map(u64::to_le_bytes).collect()
        }
        (D::Fp32, InputData::Fp32(values)) => {
            count!(values);
            values.into_iter().flat_map(f32::to_le_bytes).collect()
        }
        (D::Fp64, InputData::Fp64(values)) => {
            count!(values);
            values.into_iter().flat_map(f64::to_le_bytes).collect()
        }
        (D::Bytes, InputData::Bytes(values)) => {
            count!(values);
            let mut bytes = Vec::with_capacity(values.iter().map(|v| v.len() + 4).sum());
            for (index, value) in values.iter().enumerate() {
                if u32::try_from(value.len()).is_err() {
                    return Err(ProtocolError::BytesElementTooLong {
                        name: name.to_owned(),
                        index: index as u64,
                        len: value.len() as u64,
                    });
                }
                push_bytes_element(&mut bytes, value);
            }
            bytes
        }
        // The values came in the field of another datatype (or FP16/BF16, which have no
        // typed field): as many as the shape needs were not given.
        (_, _) => return Err(mismatch(0)),
    })
}

fn check_len(text: &str, limit: usize, at: &str, what: &'static str) -> Result<(), ProtocolError> {
    if text.len() > limit {
        return Err(ProtocolError::TooLong {
            at: at.to_owned(),
            what,
            len: text.len(),
            limit,
        });
    }
    Ok(())
}

fn check_count(count: usize, limit: usize, at: &str, what: &'static str) -> Result<(), ProtocolError> {
    if count > limit {
        return Err(ProtocolError::TooMany {
            at: at.to_owned(),
            what,
            limit,
        });
    }
    Ok(())
}

/// A parameters map under the caps (names are unique in a protobuf map).
fn checked_parameters(list: Vec<(String, ParameterValue)>, at: &str) -> Result<Parameters, ProtocolError> {
    check_count(list.len(), MAX_PARAMETERS, at, "fields or parameters")?;
    for (name, value) in &list {
        check_len(name, MAX_NAME_BYTES, at, "a field or parameter name")?;
        if let ParameterValue::String(s) = value {
            check_len(s, MAX_PARAMETER_STRING_BYTES, at, "a parameter value")?;
        }
    }
    Ok(Parameters(list))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(datatype: &str, shape: &[i64], data: InputData) -> RequestParts {
        RequestParts {
            inputs: vec![InputParts {
                name: "x".into(),
                datatype: datatype.into(),
                shape: shape.to_vec(),
                parameters: Vec::new(),
                data,
            }],
            ..RequestParts::default()
        }
    }

    #[test]
    fn typed_and_raw_data_give_the_same_tensor() {
        let typed = InferRequest::from_parts(input("FP32", &[1, 2], InputData::Fp32(vec![1.5, -2.0]))).unwrap();
        let raw_bytes: Vec<u8> = [1.5f32, -2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        let raw = InferRequest::from_parts(input("FP32", &[1, 2], InputData::Raw(raw_bytes))).unwrap();
        assert_eq!(typed, raw);
        let bytes = InferRequest::from_parts(input("BYTES", &[2], InputData::Bytes(vec![b"ab".to_vec(), vec![]])));
        assert_eq!(bytes.unwrap().inputs[0].data, [2, 0, 0, 0, b'a', b'b', 0, 0, 0, 0]);
    }

    #[test]
    fn the_same_caps_and_checks_as_rest() {
        let error = |parts| InferRequest::from_parts(parts).unwrap_err().to_string();
        assert!(error(input("FP32", &[3], InputData::Fp32(vec![1.0]))).contains("needs 3 FP32 values, got 1"));
        assert!(error(input("FP32", &[2], InputData::Raw(vec![0; 4]))).contains("needs 8 bytes"));
        assert!(error(input("INT8", &[1], InputData::Int(vec![300]))).contains("300"));
        assert!(error(input("FP99", &[1], InputData::Raw(vec![]))).contains("not a V2 datatype"));
        assert!(error(input("FP32", &[-1], InputData::Raw(vec![]))).contains("negative dimension"));
        assert!(error(input("FP32", &[1; 33], InputData::Raw(vec![0; 4]))).contains("more than 32"));
        assert!(error(input("FP32", &[1], InputData::Int64(vec![1]))).contains("needs 1 FP32 values, got 0"));
        let mut parts = input("FP32", &[1], InputData::Fp32(vec![1.0]));
        parts.id = Some("i".repeat(MAX_ID_BYTES + 1));
        assert!(error(parts).contains("\"id\""));
        let mut parts = input("FP32", &[1], InputData::Fp32(vec![1.0]));
        parts.inputs.push(parts.inputs[0].clone());
        assert!(error(parts).contains("more than once"));
        let mut parts = input("FP32", &[1], InputData::Fp32(vec![1.0]));
        parts.inputs[0].parameters = vec![("shared_memory_region".into(), ParameterValue::Bool(true))];
        assert!(error(parts).contains("not supported"));
        let mut parts = input("FP32", &[1], InputData::Fp32(vec![1.0]));
        parts.parameters = (0..65).map(|i| (i.to_string(), ParameterValue::Null)).collect();
        assert!(error(parts).contains("more than 64"));
        assert!(error(RequestParts::default()).contains("missing \"inputs\""));
    }
}
