//! V2 REST JSON inference requests → gRPC `ModelInferRequest`s, converted once before a
//! run. Tensor data goes as typed `contents` (`fp32_contents`, `int64_contents`, … by
//! datatype) or as `raw_input_contents` (little-endian bytes, BYTES elements each
//! prefixed by their length as a little-endian u32). The request's `id`, its
//! `parameters`, the inputs' `parameters` and the requested `outputs` are copied;
//! parameters must be booleans, numbers or strings.
//!
//! Datatypes: BOOL, INT8…INT64, UINT8…UINT64, FP32, FP64 and BYTES (as JSON strings).
//! FP16 and BF16 (no typed field, and no JSON form worth converting) are refused.

use std::collections::HashMap;

use anyhow::{bail, ensure, Context, Result};
use serde_json::Value;

use crate::proto::infer_parameter::ParameterChoice;
use crate::proto::model_infer_request::{InferInputTensor, InferRequestedOutputTensor};
use crate::proto::{InferParameter, InferTensorContents, ModelInferRequest};

/// How tensor data travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// In each input's `contents`, in the typed field of its datatype.
    Typed,
    /// In `raw_input_contents`, one little-endian byte string per input.
    Raw,
}

/// The model every request is sent to.
pub struct Model<'a> {
    pub name: &'a str,
    /// Empty: the version the server serves.
    pub version: &'a str,
}

/// Converts every non-blank line of a JSONL text; errors name the line.
pub fn requests(jsonl: &str, model: &Model<'_>, encoding: Encoding) -> Result<Vec<ModelInferRequest>> {
    let requests = jsonl
        .lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| request(line, model, encoding).with_context(|| format!("line {}", i + 1)))
        .collect::<Result<Vec<_>>>()?;
    ensure!(!requests.is_empty(), "no request (no non-blank line)");
    Ok(requests)
}

/// Converts one V2 JSON inference request.
pub fn request(json: &str, model: &Model<'_>, encoding: Encoding) -> Result<ModelInferRequest> {
    let value: Value = serde_json::from_str(json).context("not a JSON inference request")?;
    let Value::Object(object) = value else {
        bail!("not a JSON object")
    };
    let id = match object.get("id") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(id)) => id.clone(),
        Some(_) => bail!("'id' is not a string"),
    };
    let Some(Value::Array(inputs)) = object.get("inputs") else {
        bail!("no 'inputs' array")
    };
    let mut message = ModelInferRequest {
        model_name: model.name.to_owned(),
        model_version: model.version.to_owned(),
        id,
        parameters: parameters(object.get("parameters")).context("request parameters")?,
        ..ModelInferRequest::default()
    };
    for (i, input) in inputs.iter().enumerate() {
        let (tensor, raw) = input_tensor(input, encoding).with_context(|| match input.get("name") {
            Some(Value::String(name)) => format!("input '{name}'"),
            _ => format!("input {i}"),
        })?;
        message.inputs.push(tensor);
        message.raw_input_contents.extend(raw);
    }
    match object.get("outputs") {
        None | Some(Value::Null) => {}
        Some(Value::Array(outputs)) => {
            for (i, output) in outputs.iter().enumerate() {
                let tensor = requested_output(output).with_context(|| format!("output {i}"))?;
                message.outputs.push(tensor);
            }
        }
        Some(_) => bail!("'outputs' is not an array"),
    }
    Ok(message)
}

/// One input, and its raw bytes when `encoding` is `Raw` (then it has no `contents`).
fn input_tensor(input: &Value, encoding: Encoding) -> Result<(InferInputTensor, Option<Vec<u8>>)> {
    let name = string_field(input, "name")?;
    let datatype = string_field(input, "datatype")?;
    let Some(Value::Array(dims)) = input.get("shape") else {
        bail!("no 'shape' array")
    };
    let shape = dims
        .iter()
        .map(|d| {
            d.as_i64()
                .with_context(|| format!("shape dimension {d} is not an integer"))
        })
        .collect::<Result<Vec<_>>>()?;
    let data = input.get("data").context("no 'data'")?;
    let mut elements = Vec::new();
    flatten(data, &mut elements);

    let kind = Datatype::parse(&datatype)?;
    let (contents, raw) = match encoding {
        Encoding::Typed => (Some(typed(kind, &elements)?), None),
        Encoding::Raw => (None, Some(raw(kind, &elements)?)),
    };
    let tensor = InferInputTensor {
        name,
        datatype,
        shape,
        parameters: parameters(input.get("parameters")).context("parameters")?,
        contents,
    };
    Ok((tensor, raw))
}

fn requested_output(output: &Value) -> Result<InferRequestedOutputTensor> {
    Ok(InferRequestedOutputTensor {
        name: string_field(output, "name")?,
        parameters: parameters(output.get("parameters")).context("parameters")?,
    })
}

fn string_field(object: &Value, field: &str) -> Result<String> {
    match object.get(field) {
        Some(Value::String(text)) => Ok(text.clone()),
        Some(_) => bail!("'{field}' is not a string"),
        None => bail!("no '{field}'"),
    }
}

/// `data` flat or nested (row-major), as its elements in order. serde_json refuses
/// nesting deeper than 128, which bounds the recursion.
fn flatten<'a>(value: &'a Value, out: &mut Vec<&'a Value>) {
    match value {
        Value::Array(items) => items.iter().for_each(|item| flatten(item, out)),
        other => out.push(other),
    }
}

/// The datatypes the conversion knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Datatype {
    Bool,
    Int8,
    Int16,
    Int32,
    Int64,
    Uint8,
    Uint16,
    Uint32,
    Uint64,
    Fp32,
    Fp64,
    Bytes,
}

impl Datatype {
    fn parse(name: &str) -> Result<Self> {
        Ok(match name {
            "BOOL" => Self::Bool,
            "INT8" => Self::Int8,
            "INT16" => Self::Int16,
            "INT32" => Self::Int32,
            "INT64" => Self::Int64,
            "UINT8" => Self::Uint8,
            "UINT16" => Self::Uint16,
            "UINT32" => Self::Uint32,
            "UINT64" => Self::Uint64,
            "FP32" => Self::Fp32,
            "FP64" => Self::Fp64,
            "BYTES" => Self::Bytes,
            other => bail!(
                "datatype '{other}' cannot be converted to gRPC by the load generator \
                 (it converts BOOL, INT8-INT64, UINT8-UINT64, FP32, FP64 and BYTES)"
            ),
        })
    }
}

/// The elements in the typed field of `kind`.
fn typed(kind: Datatype, elements: &[&Value]) -> Result<InferTensorContents> {
    let mut contents = InferTensorContents::default();
    match kind {
        Datatype::Bool => contents.bool_contents = each(elements, boolean)?,
        Datatype::Int8 => contents.int_contents = each(elements, |v| int::<i8>(v).map(i32::from))?,
        Datatype::Int16 => contents.int_contents = each(elements, |v| int::<i16>(v).map(i32::from))?,
        Datatype::Int32 => contents.int_contents = each(elements, int::<i32>)?,
        Datatype::Int64 => contents.int64_contents = each(elements, int::<i64>)?,
        Datatype::Uint8 => contents.uint_contents = each(elements, |v| uint::<u8>(v).map(u32::from))?,
        Datatype::Uint16 => contents.uint_contents = each(elements, |v| uint::<u16>(v).map(u32::from))?,
        Datatype::Uint32 => contents.uint_contents = each(elements, uint::<u32>)?,
        Datatype::Uint64 => contents.uint64_contents = each(elements, uint::<u64>)?,
        Datatype::Fp32 => contents.fp32_contents = each(elements, fp32)?,
        Datatype::Fp64 => contents.fp64_contents = each(elements, fp64)?,
        Datatype::Bytes => contents.bytes_contents = each(elements, |v| string(v).map(|s| s.as_bytes().to_vec()))?,
    }
    Ok(contents)
}

/// The elements as little-endian bytes.
fn raw(kind: Datatype, elements: &[&Value]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for (i, value) in elements.iter().enumerate() {
        let mut push = || -> Result<()> {
            match kind {
                Datatype::Bool => out.push(u8::from(boolean(value)?)),
                Datatype::Int8 => out.extend(int::<i8>(value)?.to_le_bytes()),
                Datatype::Int16 => out.extend(int::<i16>(value)?.to_le_bytes()),
                Datatype::Int32 => out.extend(int::<i32>(value)?.to_le_bytes()),
                Datatype::Int64 => out.extend(int::<i64>(value)?.to_le_bytes()),
                Datatype::Uint8 => out.extend(uint::<u8>(value)?.to_le_bytes()),
                Datatype::Uint16 => out.extend(uint::<u16>(value)?.to_le_bytes()),
                Datatype::Uint32 => out.extend(uint::<u32>(value)?.to_le_bytes()),
                Datatype::Uint64 => out.extend(uint::<u64>(value)?.to_le_bytes()),
                Datatype::Fp32 => out.extend(fp32(value)?.to_le_bytes()),
                Datatype::Fp64 => out.extend(fp64(value)?.to_le_bytes()),
                Datatype::Bytes => {
                    let text = string(value)?;
                    let len = u32::try_from(text.len()).context("a BYTES element of 4 GiB or more")?;
                    out.extend(len.to_le_bytes());
                    out.extend(text.as_bytes());
                }
            }
            Ok(())
        };
        push().with_context(|| format!("element {i}"))?;
    }
    Ok(out)
}

/// Converts every element, naming the first that does not convert.
fn each<T>(elements: &[&Value], convert: impl Fn(&Value) -> Result<T>) -> Result<Vec<T>> {
    elements
        .iter()
        .enumerate()
        .map(|(i, value)| convert(value).with_context(|| format!("element {i}")))
        .collect()
}

fn boolean(value: &Value) -> Result<bool> {
    value.as_bool().with_context(|| format!("{value} is not a boolean"))
}

fn int<T: TryFrom<i64>>(value: &Value) -> Result<T> {
    value
        .as_i64()
        .and_then(|v| T::try_from(v).ok())
        .with_context(|| format!("{value} is not an integer of the tensor's datatype"))
}

fn uint<T: TryFrom<u64>>(value: &Value) -> Result<T> {
    value
        .as_u64()
        .and_then(|v| T::try_from(v).ok())
        .with_context(|| format!("{value} is not an unsigned integer of the tensor's datatype"))
}

fn fp64(value: &Value) -> Result<f64> {
    value.as_f64().with_context(|| format!("{value} is not a number"))
}

fn fp32(value: &Value) -> Result<f32> {
    // As the server reads JSON numbers for FP32: the nearest f32.
    fp64(value).map(|v| v as f32)
}

fn string(value: &Value) -> Result<&str> {
    value.as_str().with_context(|| format!("{value} is not a string"))
}

/// A `parameters` object; absent or null is none.
fn parameters(value: Option<&Value>) -> Result<HashMap<String, InferParameter>> {
    match value {
        None | Some(Value::Null) => Ok(HashMap::new()),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(name, value)| {
                let choice = parameter(value).with_context(|| format!("parameter '{name}'"))?;
                Ok((
                    name.clone(),
                    InferParameter {
                        parameter_choice: Some(choice),
                    },
                ))
            })
            .collect(),
        Some(_) => bail!("'parameters' is not an object"),
    }
}

/// A boolean, an integer (int64, or uint64 above i64::MAX), a double or a string.
fn parameter(value: &Value) -> Result<ParameterChoice> {
    Ok(match value {
        Value::Bool(b) => ParameterChoice::BoolParam(*b),
        Value::String(s) => ParameterChoice::StringParam(s.clone()),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => ParameterChoice::Int64Param(i),
            (None, Some(u), _) => ParameterChoice::Uint64Param(u),
            (None, None, Some(f)) => ParameterChoice::DoubleParam(f),
            (None, None, None) => bail!("{n} is not a representable number"),
        },
        Value::Null | Value::Array(_) | Value::Object(_) => {
            bail!("{value} is not a boolean, number or string (the only parameters gRPC carries)")
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MODEL: Model<'static> = Model { name: "m", version: "" };

    fn one(json: &str, encoding: Encoding) -> ModelInferRequest {
        request(json, &MODEL, encoding).expect("converts")
    }

    fn error(json: &str, encoding: Encoding) -> String {
        format!("{:#}", request(json, &MODEL, encoding).expect_err("refused"))
    }

    fn input(datatype: &str, shape: &str, data: &str) -> String {
        format!(r#"{{"inputs":[{{"name":"x","datatype":"{datatype}","shape":{shape},"data":{data}}}]}}"#)
    }

    #[test]
    fn fp32_typed_and_raw() {
        let json = input("FP32", "[1,3]", "[[0.5, -2, 16.0]]");
        let typed = one(&json, Encoding::Typed);
        assert_eq!(typed.model_name, "m");
        assert_eq!(typed.inputs[0].name, "x");
        assert_eq!(typed.inputs[0].datatype, "FP32");
        assert_eq!(typed.inputs[0].shape, [1, 3]);
        let contents = typed.inputs[0].contents.as_ref().expect("contents");
        assert_eq!(contents.fp32_contents, [0.5, -2.0, 16.0]);
        assert!(typed.raw_input_contents.is_empty());

        let raw = one(&json, Encoding::Raw);
        assert!(raw.inputs[0].contents.is_none());
        let expected: Vec<u8> = [0.5f32, -2.0, 16.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(raw.raw_input_contents, [expected]);
    }

    #[test]
    fn integer_float_and_bool_types() {
        let typed = |datatype: &str, data: &str| {
            let message = one(&input(datatype, "[2]", data), Encoding::Typed);
            message.inputs[0].contents.clone().expect("contents")
        };
        assert_eq!(
            typed("INT64", "[-1, 9007199254740993]").int64_contents,
            [-1, 9_007_199_254_740_993]
        );
        assert_eq!(typed("INT32", "[-5, 7]").int_contents, [-5, 7]);
        assert_eq!(typed("INT8", "[-128, 127]").int_contents, [-128, 127]);
        assert_eq!(typed("UINT16", "[0, 65535]").uint_contents, [0, 65535]);
        assert_eq!(
            typed("UINT64", "[18446744073709551615, 1]").uint64_contents,
            [u64::MAX, 1]
        );
        assert_eq!(typed("FP64", "[0.1, 3]").fp64_contents, [0.1, 3.0]);
        assert_eq!(typed("BOOL", "[true, false]").bool_contents, [true, false]);

        let raw = |datatype: &str, data: &str| one(&input(datatype, "[2]", data), Encoding::Raw).raw_input_contents;
        assert_eq!(
            raw("INT64", "[1, -1]"),
            [[1, 0, 0, 0, 0, 0, 0, 0, 255, 255, 255, 255, 255, 255, 255, 255]]
        );
        assert_eq!(raw("INT32", "[[258], [-2]]"), [[2, 1, 0, 0, 254, 255, 255, 255]]);
        assert_eq!(raw("INT16", "[1, -1]"), [[1, 0, 255, 255]]);
        assert_eq!(raw("UINT8", "[1, 255]"), [[1, 255]]);
        assert_eq!(raw("BOOL", "[true, false]"), [[1, 0]]);
        assert_eq!(
            raw("FP64", "[1.5, 0]"),
            [[0, 0, 0, 0, 0, 0, 248, 63, 0, 0, 0, 0, 0, 0, 0, 0]]
        );
    }

    #[test]
    fn bytes_as_strings() {
        let json = input("BYTES", "[2]", r#"["ab", "é"]"#);
        let typed = one(&json, Encoding::Typed);
        let contents = typed.inputs[0].contents.as_ref().expect("contents");
        assert_eq!(contents.bytes_contents, [b"ab".to_vec(), "é".as_bytes().to_vec()]);
        let raw = one(&json, Encoding::Raw);
        assert_eq!(
            raw.raw_input_contents,
            [[2, 0, 0, 0, b'a', b'b', 2, 0, 0, 0, 0xc3, 0xa9]]
        );
    }

    #[test]
    fn id_parameters_and_outputs_are_copied() {
        let json = r#"{"id":"r1","parameters":{"timeout":5000,"big":18446744073709551615,"f":0.5,
            "flag":true,"s":"x"},"inputs":[{"name":"a","datatype":"INT32","shape":[1],"data":[1],
            "parameters":{"p":1}},{"name":"b","datatype":"BOOL","shape":[1],"data":[true]}],
            "outputs":[{"name":"o","parameters":{"binary_data":false}}]}"#;
        let message = one(json, Encoding::Raw);
        assert_eq!(message.id, "r1");
        let choice = |name: &str| message.parameters[name].parameter_choice.clone().expect("choice");
        assert_eq!(choice("timeout"), ParameterChoice::Int64Param(5000));
        assert_eq!(choice("big"), ParameterChoice::Uint64Param(u64::MAX));
        assert_eq!(choice("f"), ParameterChoice::DoubleParam(0.5));
        assert_eq!(choice("flag"), ParameterChoice::BoolParam(true));
        assert_eq!(choice("s"), ParameterChoice::StringParam("x".into()));
        assert_eq!(message.inputs.len(), 2);
        assert_eq!(message.raw_input_contents, [vec![1, 0, 0, 0], vec![1]]);
        assert_eq!(
            message.inputs[0].parameters["p"].parameter_choice,
            Some(ParameterChoice::Int64Param(1))
        );
        assert_eq!(message.outputs.len(), 1);
        assert_eq!(message.outputs[0].name, "o");
        assert_eq!(
            message.outputs[0].parameters["binary_data"].parameter_choice,
            Some(ParameterChoice::BoolParam(false))
        );
    }

    #[test]
    fn refusals_say_why() {
        let fp16 = error(&input("FP16", "[1]", "[1.0]"), Encoding::Raw);
        assert!(
            fp16.contains("input 'x'") && fp16.contains("'FP16' cannot be converted"),
            "{fp16}"
        );
        let unknown = error(&input("COMPLEX", "[1]", "[1.0]"), Encoding::Typed);
        assert!(unknown.contains("'COMPLEX'"), "{unknown}");
        let range = error(&input("INT8", "[2]", "[1, 128]"), Encoding::Typed);
        assert!(range.contains("element 1") && range.contains("128"), "{range}");
        let fraction = error(&input("INT64", "[1]", "[1.5]"), Encoding::Raw);
        assert!(fraction.contains("1.5 is not an integer"), "{fraction}");
        let not_string = error(&input("BYTES", "[1]", "[1]"), Encoding::Typed);
        assert!(not_string.contains("not a string"), "{not_string}");
        let nested = error(r#"{"parameters":{"p":[1]},"inputs":[]}"#, Encoding::Typed);
        assert!(nested.contains("parameter 'p'"), "{nested}");
        assert!(error(
            r#"{"inputs":[{"name":"x","datatype":"FP32","data":[1]}]}"#,
            Encoding::Typed
        )
        .contains("shape"));
        assert!(error("[1]", Encoding::Typed).contains("not a JSON object"));
        assert!(error("{", Encoding::Typed).contains("not a JSON inference request"));
    }

    #[test]
    fn jsonl_lines_are_numbered() {
        let text = format!(
            "{}\n\n{}\n",
            input("FP32", "[1]", "[1]"),
            input("FP32", "[1]", "[true]")
        );
        let failure = format!("{:#}", requests(&text, &MODEL, Encoding::Typed).expect_err("line 3"));
        assert!(failure.starts_with("line 3: input 'x': element 0"), "{failure}");
        assert!(requests("\n \n", &MODEL, Encoding::Typed).is_err());
    }

    #[test]
    fn the_digits_requests_convert() {
        let file = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/data/digits/test_requests.jsonl"
        );
        let text = std::fs::read_to_string(file).expect("the digits requests");
        let model = Model {
            name: "digits",
            version: "1",
        };
        let typed = requests(&text, &model, Encoding::Typed).expect("typed");
        let raw = requests(&text, &model, Encoding::Raw).expect("raw");
        assert_eq!(typed.len(), text.lines().filter(|l| !l.trim().is_empty()).count());
        assert_eq!((typed[0].id.as_str(), typed[0].model_version.as_str()), ("t0", "1"));
        let fp32 = &typed[0].inputs[0].contents.as_ref().expect("contents").fp32_contents;
        assert_eq!(fp32.len(), 64);
        assert_eq!(raw[0].raw_input_contents[0].len(), 64 * 4);
        assert_eq!(raw[0].raw_input_contents[0][..4], fp32[0].to_le_bytes());
    }
}
