//! Server and model metadata bodies (`GET /v2`, `GET /v2/models/{m}[/versions/{v}]`):
//! plain structs the caller fills, serialized as the V2 protocol spells them.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::model::tensor::DataType;

/// `GET /v2`: `{"name": ..., "version": ..., "extensions": [...]}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerMetadata {
    pub name: String,
    pub version: String,
    pub extensions: Vec<String>,
}

/// `GET /v2/models/{m}`: `{"name", "versions", "platform", "inputs", "outputs"}`, and
/// `parameters` (as MLServer adds them) when the model's plugins declared metadata.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelMetadata {
    pub name: String,
    pub versions: Vec<String>,
    pub platform: String,
    pub inputs: Vec<TensorMetadata>,
    pub outputs: Vec<TensorMetadata>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parameters: BTreeMap<String, String>,
}

/// One declared input or output; `-1` in `shape` marks a variable-size dimension.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorMetadata {
    pub name: String,
    #[serde(serialize_with = "datatype_out", deserialize_with = "datatype_in")]
    pub datatype: DataType,
    pub shape: Vec<i64>,
}

fn datatype_out<S: Serializer>(datatype: &DataType, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(datatype.as_str())
}

fn datatype_in<'de, D: Deserializer<'de>>(deserializer: D) -> Result<DataType, D::Error> {
    let name = String::deserialize(deserializer)?;
    DataType::parse(&name).ok_or_else(|| serde::de::Error::custom(format!("datatype {name:?} is not a V2 datatype")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_metadata_json_shape() {
        let m = ModelMetadata {
            name: "digits".into(),
            versions: vec!["1".into()],
            platform: "tensorplug_wasm".into(),
            inputs: vec![TensorMetadata {
                name: "input-0".into(),
                datatype: DataType::Fp32,
                shape: vec![-1, 64],
            }],
            outputs: vec![TensorMetadata {
                name: "label".into(),
                datatype: DataType::Int64,
                shape: vec![-1],
            }],
            parameters: BTreeMap::new(),
        };
        let json = serde_json::to_string(&m).unwrap();
        assert_eq!(
            json,
            r#"{"name":"digits","versions":["1"],"platform":"tensorplug_wasm","inputs":[{"name":"input-0","datatype":"FP32","shape":[-1,64]}],"outputs":[{"name":"label","datatype":"INT64","shape":[-1]}]}"#
        );
        assert_eq!(serde_json::from_str::<ModelMetadata>(&json).unwrap(), m);
        let declared = ModelMetadata {
            parameters: BTreeMap::from([("labels".to_string(), "a,b".to_string())]),
            ..m
        };
        let json = serde_json::to_string(&declared).unwrap();
        assert!(json.ends_with(r#""parameters":{"labels":"a,b"}}"#), "{json}");
    }

    #[test]
    fn server_metadata_json_shape() {
        let s = ServerMetadata {
            name: "tensorplug".into(),
            version: "0.1.0".into(),
            extensions: vec!["binary_tensor_data".into()],
        };
        assert_eq!(
            serde_json::to_string(&s).unwrap(),
            r#"{"name":"tensorplug","version":"0.1.0","extensions":["binary_tensor_data"]}"#
        );
    }
}
