//! Requests the gRPC tests send, built once here.

use tensorplug::grpc::proto::model_infer_request::InferInputTensor;
use tensorplug::grpc::proto::{InferTensorContents, ModelInferRequest};

/// A request to the faulty model: one item per value (`x: FP32 [N, 1]`; negative values
/// are its fault codes), as typed contents.
pub fn faulty_request(values: &[f32]) -> ModelInferRequest {
    ModelInferRequest {
        model_name: "faulty".into(),
        inputs: vec![InferInputTensor {
            name: "x".into(),
            datatype: "FP32".into(),
            shape: vec![values.len() as i64, 1],
            contents: Some(InferTensorContents {
                fp32_contents: values.to_vec(),
                ..Default::default()
            }),
            ..Default::default()
        }],
        ..Default::default()
    }
}
