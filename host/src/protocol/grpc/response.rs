//! `ModelInferResponse`: a server writes the outputs of a successful call; a client reads
//! them back into a [`client::ServerAnswer`](crate::protocol::client::ServerAnswer).

use std::collections::HashMap;

use super::contents::{dims, typed_data};
use super::error::MessageError;
use super::proto::model_infer_response::InferOutputTensor;
use super::proto::ModelInferResponse;
use crate::model::tensor::{DataType, Tensor};
use crate::protocol::client::ServerAnswer;
use crate::protocol::error::render_str;
use crate::protocol::parts::tensor_from_data;
use crate::protocol::{InputData, ProtocolError};

/// A successful answer: every output's data in `raw_output_contents` (as Triton answers).
pub fn write_response(
    model_name: String,
    model_version: String,
    id: Option<String>,
    outputs: Vec<Tensor>,
) -> ModelInferResponse {
    let mut message = ModelInferResponse {
        model_name,
        model_version,
        id: id.unwrap_or_default(),
        parameters: HashMap::new(),
        outputs: Vec::with_capacity(outputs.len()),
        raw_output_contents: Vec::with_capacity(outputs.len()),
    };
    for tensor in outputs {
        message.outputs.push(InferOutputTensor {
            name: tensor.name,
            datatype: tensor.datatype.as_str().to_owned(),
            shape: dims(&tensor.shape),
            parameters: HashMap::new(),
            contents: None,
        });
        message.raw_output_contents.push(tensor.data);
    }
    message
}

/// A successful answer's outputs, as validated tensors: from `raw_output_contents`, or
/// from typed `contents` (as other servers may answer).
pub fn read_response(response: ModelInferResponse) -> Result<ServerAnswer, MessageError> {
    let ModelInferResponse {
        model_name,
        model_version,
        id,
        outputs,
        raw_output_contents,
        ..
    } = response;
    if !raw_output_contents.is_empty() && raw_output_contents.len() != outputs.len() {
        return Err(MessageError::RawOutputs {
            raw: raw_output_contents.len(),
            outputs: outputs.len(),
        });
    }
    let mut raw = raw_output_contents.into_iter();
    let outputs = outputs
        .into_iter()
        .map(|output| read_output(output, raw.next()))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ServerAnswer::Success {
        model_name,
        model_version,
        id: (!id.is_empty()).then_some(id),
        outputs,
    })
}

fn read_output(output: InferOutputTensor, raw: Option<Vec<u8>>) -> Result<Tensor, ProtocolError> {
    let InferOutputTensor {
        name,
        datatype,
        shape,
        contents,
        ..
    } = output;
    let Some(parsed) = DataType::parse(&datatype) else {
        return Err(ProtocolError::UnknownDatatype {
            name,
            found: render_str(&datatype),
        });
    };
    let Some(dims) = shape
        .iter()
        .map(|&d| u64::try_from(d).ok())
        .collect::<Option<Vec<u64>>>()
    else {
        let dim = shape.iter().copied().find(|d| *d < 0).unwrap_or_default();
        return Err(ProtocolError::NegativeDimension {
            name,
            shape: format!("{shape:?}"),
            dim,
        });
    };
    let data = match raw {
        Some(bytes) => InputData::Raw(bytes),
        None => typed_data(&datatype, contents.unwrap_or_default()),
    };
    tensor_from_data(name, parsed, dims, data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::grpc::proto::InferTensorContents;

    fn output(datatype: &str, shape: Vec<i64>, contents: Option<InferTensorContents>) -> InferOutputTensor {
        InferOutputTensor {
            name: "y".into(),
            datatype: datatype.into(),
            shape,
            parameters: HashMap::new(),
            contents,
        }
    }

    #[test]
    fn answers_read_back_what_the_server_writes() {
        let outputs = vec![
            Tensor {
                name: "y".into(),
                datatype: DataType::Fp32,
                shape: vec![2, 1],
                data: [0.5f32, -1.0].iter().flat_map(|v| v.to_le_bytes()).collect(),
            },
            Tensor {
                name: "s".into(),
                datatype: DataType::Bytes,
                shape: vec![1],
                data: vec![2, 0, 0, 0, b'o', b'k'],
            },
        ];
        let message = write_response("m".into(), "3".into(), Some("i".into()), outputs.clone());
        assert_eq!(message.raw_output_contents.len(), 2);
        assert_eq!(message.outputs[0].shape, [2, 1]);
        assert_eq!(
            read_response(message).unwrap(),
            ServerAnswer::Success {
                model_name: "m".into(),
                model_version: "3".into(),
                id: Some("i".into()),
                outputs,
            }
        );
    }

    #[test]
    fn raw_and_typed_outputs_read_the_same() {
        let typed = output(
            "INT16",
            vec![2],
            Some(InferTensorContents {
                int_contents: vec![-2, 7],
                ..Default::default()
            }),
        );
        let from_typed = read_output(typed.clone(), None).unwrap();
        let from_raw = read_output(typed, Some([(-2i16).to_le_bytes(), 7i16.to_le_bytes()].concat())).unwrap();
        assert_eq!(from_typed, from_raw);
        // Typed values are checked as a request's are: their count and their range.
        assert!(read_output(output("FP32", vec![2], None), Some(vec![0; 4])).is_err());
        let wide = InferTensorContents {
            int_contents: vec![1 << 20],
            ..Default::default()
        };
        let error = read_output(output("INT16", vec![1], Some(wide)), None).unwrap_err();
        assert!(error.to_string().contains("does not fit INT16"), "{error}");
        let error = read_output(output("FP99", vec![1], None), None).unwrap_err();
        assert!(error.to_string().contains("not a V2 datatype"), "{error}");
        let error = read_output(output("FP32", vec![-1], None), None).unwrap_err();
        assert!(error.to_string().contains("negative dimension -1"), "{error}");
        let mut message = write_response("m".into(), String::new(), None, Vec::new());
        message.outputs.push(output("FP32", vec![1], None));
        message.raw_output_contents = vec![vec![0; 4], vec![0; 4]];
        assert_eq!(
            read_response(message).unwrap_err(),
            MessageError::RawOutputs { raw: 2, outputs: 1 }
        );
    }
}
