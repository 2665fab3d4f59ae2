//! `parameters` maps ↔ the protocol's parameter lists.

use std::collections::HashMap;

use super::proto::infer_parameter::ParameterChoice;
use super::proto::InferParameter;
use crate::protocol::{ParameterValue, Parameters};

/// A parameters map as the protocol's list, sorted by name (so messages are stable).
pub(super) fn read_parameters(map: HashMap<String, InferParameter>) -> Vec<(String, ParameterValue)> {
    let mut list: Vec<(String, ParameterValue)> = map
        .into_iter()
        .map(|(name, p)| {
            let value = match p.parameter_choice {
                None => ParameterValue::Null,
                Some(ParameterChoice::BoolParam(b)) => ParameterValue::Bool(b),
                Some(ParameterChoice::Int64Param(i)) => ParameterValue::Number(i.into()),
                Some(ParameterChoice::Uint64Param(u)) => ParameterValue::Number(u.into()),
                Some(ParameterChoice::StringParam(s)) => ParameterValue::String(s),
                Some(ParameterChoice::DoubleParam(d)) => {
                    serde_json::Number::from_f64(d).map_or(ParameterValue::Null, ParameterValue::Number)
                }
            };
            (name, value)
        })
        .collect();
    list.sort_by(|a, b| a.0.cmp(&b.0));
    list
}

/// Request parameters as protobuf values: booleans, numbers and strings (nothing else
/// has a protobuf form); binary-output choices mean nothing over gRPC.
pub(super) fn write_parameters(parameters: &Parameters) -> HashMap<String, InferParameter> {
    parameters
        .iter()
        .filter(|(name, _)| *name != "binary_data_output")
        .filter_map(|(name, value)| {
            let choice = match value {
                ParameterValue::Bool(b) => ParameterChoice::BoolParam(*b),
                ParameterValue::String(s) => ParameterChoice::StringParam(s.clone()),
                ParameterValue::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
                    (Some(i), _, _) => ParameterChoice::Int64Param(i),
                    (None, Some(u), _) => ParameterChoice::Uint64Param(u),
                    (None, None, Some(f)) => ParameterChoice::DoubleParam(f),
                    (None, None, None) => return None,
                },
                ParameterValue::Null | ParameterValue::Structured => return None,
            };
            Some((
                name.to_owned(),
                InferParameter {
                    parameter_choice: Some(choice),
                },
            ))
        })
        .collect()
}
