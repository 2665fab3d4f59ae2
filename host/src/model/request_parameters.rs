//! Request parameters a model's plugins read (`[request_parameters]` in `model.toml`):
//! the plugin contract passes items, not requests, so each item of a request gets the
//! parameter's value as a scalar tensor of the parameter's name, after its inputs — the
//! way a text model's tokenizer learns a request's `truncate: false`.

use super::tensor::{push_bytes_element, DataType, Tensor};

/// One declared request parameter.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestParameter {
    pub name: String,
    /// BOOL, INT64, FP64 or BYTES (a string).
    pub datatype: DataType,
    /// The value an item gets when the request does not give one; without it, such an
    /// item gets no tensor of this name.
    pub default: Option<ParameterScalar>,
}

/// A parameter's value, as the scalar tensor it becomes.
#[derive(Clone, Debug, PartialEq)]
pub enum ParameterScalar {
    Bool(bool),
    Int(i64),
    Float(f64),
    Text(String),
}

/// The datatypes a request parameter may have.
const PARAMETER_TYPES: [DataType; 4] = [DataType::Bool, DataType::Int64, DataType::Fp64, DataType::Bytes];

/// Most request parameters a model may declare.
pub const MAX_REQUEST_PARAMETERS: usize = 16;

impl RequestParameter {
    /// `value` as this parameter's scalar tensor, if it has the parameter's type (an
    /// integer is taken for FP64).
    pub fn tensor(&self, value: &ParameterScalar) -> Option<Tensor> {
        let data = match (self.datatype, value) {
            (DataType::Bool, ParameterScalar::Bool(b)) => vec![u8::from(*b)],
            (DataType::Int64, ParameterScalar::Int(i)) => i.to_le_bytes().to_vec(),
            (DataType::Fp64, ParameterScalar::Float(f)) => f.to_le_bytes().to_vec(),
            (DataType::Fp64, ParameterScalar::Int(i)) => (*i as f64).to_le_bytes().to_vec(),
            (DataType::Bytes, ParameterScalar::Text(s)) => {
                let mut data = Vec::with_capacity(s.len() + 4);
                push_bytes_element(&mut data, s.as_bytes());
                data
            }
            _ => return None,
        };
        Some(Tensor {
            name: self.name.clone(),
            datatype: self.datatype,
            shape: Vec::new(),
            data,
        })
    }

    /// What a client must send, for error messages.
    pub fn expected(&self) -> &'static str {
        match self.datatype {
            DataType::Bool => "a boolean",
            DataType::Int64 => "an integer",
            DataType::Fp64 => "a number",
            _ => "a string",
        }
    }
}

/// Parses `[request_parameters]`: `name = { datatype = "BOOL", default = true }`.
/// `inputs` are the model's input names, which a parameter may not shadow.
pub fn parse(
    raw: impl IntoIterator<Item = (String, RawRequestParameter)>,
    inputs: &[&str],
) -> Result<Vec<RequestParameter>, String> {
    let mut parameters = Vec::new();
    for (name, raw) in raw {
        let key = format!("request_parameters.{name}");
        if name.is_empty() || name.len() > 64 || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("key `{key}`: a name is 1-64 letters, digits and '_'"));
        }
        if inputs.contains(&name.as_str()) {
            return Err(format!("key `{key}`: an input has this name"));
        }
        let datatype = DataType::parse(&raw.datatype)
            .filter(|d| PARAMETER_TYPES.contains(d))
            .ok_or_else(|| {
                format!(
                    "key `{key}.datatype`: {:?} is not BOOL, INT64, FP64 or BYTES",
                    raw.datatype
                )
            })?;
        let mut parameter = RequestParameter {
            name,
            datatype,
            default: None,
        };
        if let Some(value) = raw.default {
            let scalar = match value {
                toml::Value::Boolean(b) => ParameterScalar::Bool(b),
                toml::Value::Integer(i) => ParameterScalar::Int(i),
                toml::Value::Float(f) => ParameterScalar::Float(f),
                toml::Value::String(s) => ParameterScalar::Text(s),
                _ => ParameterScalar::Text(String::new()),
            };
            if parameter.tensor(&scalar).is_none() {
                return Err(format!("key `{key}.default`: must be {}", parameter.expected()));
            }
            parameter.default = Some(scalar);
        }
        parameters.push(parameter);
    }
    if parameters.len() > MAX_REQUEST_PARAMETERS {
        return Err(format!(
            "key `request_parameters`: {} parameters; a model may declare at most {MAX_REQUEST_PARAMETERS}",
            parameters.len()
        ));
    }
    Ok(parameters)
}

/// One entry of `[request_parameters]` as written.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRequestParameter {
    datatype: String,
    default: Option<toml::Value>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Result<Vec<RequestParameter>, String> {
        let raw: std::collections::BTreeMap<String, RawRequestParameter> =
            toml::from_str(text).map_err(|e| e.to_string())?;
        parse(raw, &["text"])
    }

    #[test]
    fn parameters_are_typed_and_checked() {
        let p = parsed("truncate = { datatype = \"BOOL\", default = true }\nlimit = { datatype = \"FP64\" }").unwrap();
        assert_eq!(p[0].name, "limit");
        assert_eq!(p[0].default, None);
        assert_eq!(p[1].default, Some(ParameterScalar::Bool(true)));
        let t = p[1].tensor(&ParameterScalar::Bool(false)).unwrap();
        assert_eq!((t.shape.len(), t.data, t.datatype), (0, vec![0], DataType::Bool));
        assert!(p[1].tensor(&ParameterScalar::Int(1)).is_none());
        assert_eq!(p[0].tensor(&ParameterScalar::Int(2)).unwrap().data, 2f64.to_le_bytes());
        for (bad, says) in [
            ("text = { datatype = \"BOOL\" }", "an input has this name"),
            ("x = { datatype = \"FP32\" }", "not BOOL, INT64, FP64 or BYTES"),
            ("x = { datatype = \"BOOL\", default = 1 }", "must be a boolean"),
            ("\"a-b\" = { datatype = \"BOOL\" }", "letters, digits"),
        ] {
            let err = parsed(bad).unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
        }
        assert!(parsed("x = { datatype = \"BOOL\", typo = 1 }").is_err());
    }
}
