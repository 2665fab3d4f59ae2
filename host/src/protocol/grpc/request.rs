//! `ModelInferRequest` ↔ [`InferRequest`]: a server reads one into the same validated
//! request the REST edge builds, under the same caps; a client writes one.

use std::collections::HashMap;

use super::contents::{dims, has_values, typed_contents, typed_data};
use super::error::MessageError;
use super::parameters::{read_parameters, write_parameters};
use super::proto::model_infer_request::{InferInputTensor, InferRequestedOutputTensor};
use super::proto::ModelInferRequest;
use crate::model::tensor::{DataType, Tensor};
use crate::protocol::{clip, InferRequest, InputData, InputParts, OutputParts, RequestParts};

/// A `ModelInferRequest` as a validated [`InferRequest`] (its model name and version are
/// the caller's to read first).
pub fn read_request(mut message: ModelInferRequest) -> Result<InferRequest, MessageError> {
    let raw = std::mem::take(&mut message.raw_input_contents);
    if !raw.is_empty() && raw.len() != message.inputs.len() {
        return Err(MessageError::RawInputs {
            raw: raw.len(),
            inputs: message.inputs.len(),
        });
    }
    let mut raw = raw.into_iter();
    let mut inputs = Vec::with_capacity(message.inputs.len());
    for input in message.inputs {
        let InferInputTensor {
            name,
            datatype,
            shape,
            parameters,
            contents,
        } = input;
        let data = match raw.next() {
            Some(bytes) => {
                if contents.as_ref().is_some_and(has_values) {
                    return Err(MessageError::ContentsAndRaw {
                        name: clip(&name).into_owned(),
                    });
                }
                InputData::Raw(bytes)
            }
            None => typed_data(&datatype, contents.unwrap_or_default()),
        };
        inputs.push(InputParts {
            name,
            datatype,
            shape,
            parameters: read_parameters(parameters),
            data,
        });
    }
    let outputs = message
        .outputs
        .into_iter()
        .map(|o| OutputParts {
            name: o.name,
            parameters: read_parameters(o.parameters),
        })
        .collect();
    Ok(InferRequest::from_parts(RequestParts {
        id: Some(message.id),
        parameters: read_parameters(message.parameters),
        inputs,
        outputs,
    })?)
}

/// `request` for `model_name` (at `model_version`; empty: the one served), its inputs in
/// `raw_input_contents`: the tensors' bytes as they are, as tensorplug's client sends
/// them.
pub fn write_request(request: InferRequest, model_name: &str, model_version: &str) -> ModelInferRequest {
    let (mut message, inputs) = without_inputs(request, model_name, model_version);
    message.raw_input_contents.reserve_exact(inputs.len());
    for tensor in inputs {
        let (header, _, data) = input_header(tensor);
        message.inputs.push(header);
        message.raw_input_contents.push(data);
    }
    message
}

/// [`write_request`] with every input's values in the typed field of its datatype
/// instead; FP16 has none, and is refused.
pub fn write_typed_request(
    request: InferRequest,
    model_name: &str,
    model_version: &str,
) -> Result<ModelInferRequest, MessageError> {
    let (mut message, inputs) = without_inputs(request, model_name, model_version);
    for tensor in inputs {
        let (mut header, datatype, data) = input_header(tensor);
        let contents = typed_contents(datatype, &data).ok_or_else(|| MessageError::NoTypedField {
            name: clip(&header.name).into_owned(),
            datatype,
        })?;
        header.contents = Some(contents);
        message.inputs.push(header);
    }
    Ok(message)
}

/// The message of `request` but for its inputs, which come back to be placed.
fn without_inputs(request: InferRequest, model_name: &str, model_version: &str) -> (ModelInferRequest, Vec<Tensor>) {
    let InferRequest {
        id,
        inputs,
        outputs,
        parameters,
    } = request;
    let message = ModelInferRequest {
        model_name: model_name.to_owned(),
        model_version: model_version.to_owned(),
        id: id.unwrap_or_default(),
        parameters: write_parameters(&parameters),
        inputs: Vec::with_capacity(inputs.len()),
        outputs: outputs
            .into_iter()
            .map(|o| InferRequestedOutputTensor {
                name: o.name,
                parameters: HashMap::new(),
            })
            .collect(),
        raw_input_contents: Vec::new(),
    };
    (message, inputs)
}

/// An input's header (without contents), its datatype and its data.
fn input_header(tensor: Tensor) -> (InferInputTensor, DataType, Vec<u8>) {
    let header = InferInputTensor {
        name: tensor.name,
        datatype: tensor.datatype.as_str().to_owned(),
        shape: dims(&tensor.shape),
        parameters: HashMap::new(),
        contents: None,
    };
    (header, tensor.datatype, tensor.data)
}

#[cfg(test)]
mod tests {
    use super::super::proto::infer_parameter::ParameterChoice;
    use super::super::proto::InferTensorContents;
    use super::*;
    use crate::protocol::{decode_request, ParameterValue};

    /// A request of every datatype with a typed field, as the REST edge reads it.
    fn every_datatype() -> InferRequest {
        let body = br#"{"id":"r1","parameters":{"timeout":5,"big":18446744073709551615,"f":0.5,"flag":true,
            "s":"x","binary_data_output":true,"nested":{"a":1}},"inputs":[
            {"name":"b","datatype":"BOOL","shape":[2],"data":[true,false]},
            {"name":"i8","datatype":"INT8","shape":[2],"data":[-128,127]},
            {"name":"i16","datatype":"INT16","shape":[2],"data":[-1,300]},
            {"name":"i32","datatype":"INT32","shape":[1,2],"data":[[258],[-2]]},
            {"name":"i64","datatype":"INT64","shape":[2],"data":[-1,9007199254740993]},
            {"name":"u8","datatype":"UINT8","shape":[2],"data":[0,255]},
            {"name":"u16","datatype":"UINT16","shape":[2],"data":[0,65535]},
            {"name":"u32","datatype":"UINT32","shape":[1],"data":[4294967295]},
            {"name":"u64","datatype":"UINT64","shape":[2],"data":[18446744073709551615,1]},
            {"name":"f32","datatype":"FP32","shape":[3],"data":[0.5,-2,16.0]},
            {"name":"f64","datatype":"FP64","shape":[2],"data":[0.1,3]},
            {"name":"s","datatype":"BYTES","shape":[2],"data":["ab","\u00e9"]}],
            "outputs":[{"name":"o"}]}"#;
        decode_request(body, None).unwrap()
    }

    #[test]
    fn written_requests_read_back_raw_or_typed() {
        let request = every_datatype();
        let raw = write_request(request.clone(), "m", "2");
        assert_eq!(
            (raw.model_name.as_str(), raw.model_version.as_str(), raw.id.as_str()),
            ("m", "2", "r1")
        );
        assert_eq!(raw.raw_input_contents.len(), request.inputs.len());
        assert!(raw.inputs.iter().all(|i| i.contents.is_none()));
        let typed = write_typed_request(request.clone(), "m", "").unwrap();
        assert!(typed.raw_input_contents.is_empty());
        let contents = |name: &str| {
            typed
                .inputs
                .iter()
                .find(|i| i.name == name)
                .unwrap()
                .contents
                .clone()
                .unwrap()
        };
        assert_eq!(contents("i8").int_contents, [-128, 127]);
        assert_eq!(contents("i64").int64_contents, [-1, 9_007_199_254_740_993]);
        assert_eq!(contents("u16").uint_contents, [0, 65535]);
        assert_eq!(contents("f32").fp32_contents, [0.5, -2.0, 16.0]);
        assert_eq!(contents("s").bytes_contents, [b"ab".to_vec(), "é".as_bytes().to_vec()]);
        // Booleans, numbers and strings travel; binary-output choices and structures do not.
        let choice = |name: &str| typed.parameters[name].parameter_choice.clone().unwrap();
        assert_eq!(choice("big"), ParameterChoice::Uint64Param(u64::MAX));
        assert_eq!(choice("f"), ParameterChoice::DoubleParam(0.5));
        assert!(!typed.parameters.contains_key("binary_data_output") && !typed.parameters.contains_key("nested"));
        for message in [raw, typed] {
            let back = read_request(message).unwrap();
            assert_eq!(back.inputs, request.inputs);
            assert_eq!(back.id, request.id);
            assert_eq!(back.outputs[0].name, "o");
            assert_eq!(back.parameters.get("timeout"), Some(&ParameterValue::Number(5.into())));
        }
    }

    #[test]
    fn fp16_has_no_typed_field() {
        let body = br#"{"inputs":[{"name":"h","datatype":"FP16","shape":[1],"parameters":{"binary_data_size":2}}]}"#;
        let mut with_binary = body.to_vec();
        with_binary.extend([0, 60]);
        let request = decode_request(&with_binary, Some(body.len())).unwrap();
        assert_eq!(
            write_typed_request(request.clone(), "m", "").unwrap_err(),
            MessageError::NoTypedField {
                name: "h".into(),
                datatype: DataType::Fp16
            }
        );
        assert_eq!(
            read_request(write_request(request.clone(), "m", "")).unwrap().inputs,
            request.inputs
        );
    }

    #[test]
    fn raw_contents_are_one_per_input_and_alone() {
        let mut message = write_request(every_datatype(), "m", "");
        message.raw_input_contents.pop();
        let error = read_request(message).unwrap_err().to_string();
        assert!(
            error.starts_with("raw_input_contents has 11 entries for 12 inputs"),
            "{error}"
        );
        let mut message = write_request(every_datatype(), "m", "");
        message.inputs[0].contents = Some(InferTensorContents {
            bool_contents: vec![true, true],
            ..Default::default()
        });
        assert_eq!(
            read_request(message).unwrap_err(),
            MessageError::ContentsAndRaw { name: "b".into() }
        );
        // Typed values are checked as REST's are.
        let mut message = write_typed_request(every_datatype(), "m", "").unwrap();
        message.inputs[1].contents = Some(InferTensorContents {
            int_contents: vec![1, 300],
            ..Default::default()
        });
        let error = read_request(message).unwrap_err().to_string();
        assert!(error.contains("value 300 does not fit INT8"), "{error}");
    }
}
